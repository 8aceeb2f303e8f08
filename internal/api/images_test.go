package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-sandbox/cove/internal/image/ocigen"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func imageServer(t *testing.T) (*testServer, string) {
	dir := t.TempDir()
	agent := filepath.Join(t.TempDir(), "cove-agent")
	os.WriteFile(agent, []byte("agent"), 0o755)
	return newServer(t, func(c *Config) { c.Images = ImageStore{Dir: dir, Agent: agent} }), dir
}

func layoutTar(t *testing.T) []byte {
	l, err := ocigen.LayerTar([]ocigen.Entry{ocigen.Dir("etc/", 0o755, 0, 0), ocigen.File("etc/hello", 0o644, 0, 0, "hi\n")})
	if err != nil {
		t.Fatal(err)
	}
	img, err := ocigen.Image(v1.Config{WorkingDir: "/etc"}, l)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ocigen.WriteLayoutTar(context.Background(), &buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestImagesAPI imports (plain and streamed), lists, gets and deletes.
func TestImagesAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an import keeps the layers' owners: root only")
	}
	s, dir := imageServer(t)
	archive := layoutTar(t)
	resp, body := s.do(t, "POST", "/v1/images?name=mine", bytes.NewReader(archive), nil)
	var info apitype.ImageInfo
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &info) != nil || info.Name != "mine" || info.Config.WorkingDir != "/etc" {
		t.Fatalf("import: %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "POST", "/v1/images?name=mine", bytes.NewReader(archive), hdr{"Accept": apitype.ContentTypeNDJSON})
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var last apitype.ImageImportEvent
	if resp.StatusCode != http.StatusOK || len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil || last.Image == nil || last.Image.ID != info.ID {
		t.Fatalf("streamed import: %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "GET", "/v1/images", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), info.ID) {
		t.Errorf("list: %d %s", resp.StatusCode, body)
	}
	if resp, body = s.do(t, "GET", "/v1/images/mine", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("get: %d %s", resp.StatusCode, body)
	}
	if resp, body = s.do(t, "DELETE", "/v1/images/default", nil, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("delete the default image: %d %s", resp.StatusCode, body)
	}
	if resp, body = s.do(t, "DELETE", "/v1/images/mine", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), info.ID) {
		t.Errorf("delete: %d %s", resp.StatusCode, body)
	}
	if resp, _ = s.do(t, "GET", "/v1/images/mine", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("get after delete: %d", resp.StatusCode)
	}
	if strings.Contains(string(body), dir) {
		t.Errorf("an answer names the store's path: %s", body)
	}
}

// TestImagesAPIBad: bad requests are 400s that name the problem, not the
// store's path.
func TestImagesAPIBad(t *testing.T) {
	s, dir := imageServer(t)
	for _, tc := range []struct {
		path, body, want string
		status           int
	}{
		{"/v1/images", "x", "name is required", 400},
		{"/v1/images?name=../x", "x", "invalid image name", 400},
		{"/v1/images?name=default", "x", "default image", 409},
		{"/v1/images?name=ok", strings.Repeat("junk", 300), "not a valid tar archive", 400},
		{"/v1/images?name=ok&ref=bad::ref", "", "reference", 400},
	} {
		resp, body := s.do(t, "POST", tc.path, strings.NewReader(tc.body), nil)
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) || strings.Contains(string(body), dir) {
			t.Errorf("POST %s: %d %s, want %d naming %q", tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
	}
	if resp, body := s.do(t, "DELETE", "/v1/images/nope", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("delete a missing image: %d %s", resp.StatusCode, body)
	}
}

// TestImagesAPITooLarge: an upload past the bound is a 413.
func TestImagesAPITooLarge(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "cove-agent")
	os.WriteFile(agent, []byte("agent"), 0o755)
	s := newServer(t, func(c *Config) { c.Images = ImageStore{Dir: t.TempDir(), Agent: agent, MaxBytes: 1024} })
	resp, body := s.do(t, "POST", "/v1/images?name=big", bytes.NewReader(make([]byte, 4096)), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "size limit") {
		t.Errorf("import past the bound: %d %s", resp.StatusCode, body)
	}
}
