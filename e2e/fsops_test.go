package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestFileOps drives stat, mkdir, move and remove through the API on one
// sandbox of the shared daemon, each refusal checked to change nothing.
func TestFileOps(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx := context.Background()

	if fi, err := d.c.MakeDir(ctx, sb.id, sb.token, "a/b/c", 0); err != nil || fi.Type != "dir" || fi.Path != "/work/a/b/c" || fi.Mode != "0755" {
		t.Fatalf("mkdir -p = %+v, %v", fi, err)
	}
	if _, err := d.c.MakeDir(ctx, sb.id, sb.token, "/work/a/b/c", 0o700); err != nil {
		t.Fatalf("mkdir of an existing dir: %v", err)
	}

	data := make([]byte, 3<<20+7)
	rand.Read(data)
	sum := sha256.Sum256(data)
	fi, err := d.c.PutFile(ctx, sb.id, sb.token, "a/b/c/f.bin", 0o640, strings.NewReader(string(data)), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if fi.SHA256 != hex.EncodeToString(sum[:]) || fi.Size != int64(len(data)) {
		t.Fatalf("put answered sha256 %q size %d, want %x and %d", fi.SHA256, fi.Size, sum, len(data))
	}
	if fi, err = d.c.Stat(ctx, sb.id, sb.token, "/work/a/b/c/f.bin"); err != nil || fi.Type != "file" || fi.Size != int64(len(data)) || fi.Mode != "0640" {
		t.Fatalf("stat = %+v, %v", fi, err)
	}

	if fi, err = d.c.Move(ctx, sb.id, sb.token, "a/b/c/f.bin", "a/f.bin", false); err != nil || fi.Path != "/work/a/f.bin" || fi.Size != int64(len(data)) {
		t.Fatalf("move = %+v, %v", fi, err)
	}
	execOK(t, d, sb, "printf other > /work/a/other")
	if _, err := d.c.Move(ctx, sb.id, sb.token, "a/f.bin", "a/other", false); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("move onto an existing file without overwrite: %v, want 409", err)
	}
	if out := execOK(t, d, sb, "cat /work/a/other; test -f /work/a/f.bin && echo kept"); out != "otherkept\n" {
		t.Fatalf("after a refused move: %q", out)
	}
	if _, err := d.c.Move(ctx, sb.id, sb.token, "a/f.bin", "a/other", true); err != nil {
		t.Fatalf("move with overwrite: %v", err)
	}
	if out := execOK(t, d, sb, "sha256sum /work/a/other | cut -d' ' -f1; test -e /work/a/f.bin || echo gone"); out != hex.EncodeToString(sum[:])+"\ngone\n" {
		t.Fatalf("after move with overwrite: %q", out)
	}

	if err := d.c.Remove(ctx, sb.id, sb.token, "a", false); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("remove of a non-empty dir without recursive: %v, want 409", err)
	}
	if _, err := d.c.Stat(ctx, sb.id, sb.token, "a/other"); err != nil {
		t.Fatalf("a refused remove took something: %v", err)
	}

	// A symlink to outside /work is removed and moved as itself.
	execOK(t, d, sb, "mkdir -p /tmp/keep && echo k > /tmp/keep/k && ln -s /tmp/keep /work/a/link && ln -s /tmp/keep /work/link2")
	if fi, err := d.c.Stat(ctx, sb.id, sb.token, "link2"); err != nil || fi.Type != "symlink" || fi.Target != "/tmp/keep" {
		t.Fatalf("stat of a symlink = %+v, %v", fi, err)
	}
	if _, err := d.c.Move(ctx, sb.id, sb.token, "link2", "link3", false); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Remove(ctx, sb.id, sb.token, "link3/", true); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Remove(ctx, sb.id, sb.token, "a", true); err != nil {
		t.Fatalf("remove -r: %v", err)
	}
	if out := execOK(t, d, sb, "cat /tmp/keep/k; ls -A /work"); out != "k\n" {
		t.Fatalf("after removing links to /tmp/keep: %q, want its file kept and /work empty", out)
	}
	if _, err := d.c.Stat(ctx, sb.id, sb.token, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat of the removed dir: %v, want 404", err)
	}

	// Bad input: a clear 4xx, nothing changed.
	execOK(t, d, sb, "mkdir -p /work/x && echo x > /work/x/x")
	h := map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: sb.token, "Content-Type": "application/json"}
	base := d.url + "/v1/sandboxes/" + sb.id
	for _, tc := range []struct {
		method, url, body string
		want              int
	}{
		{"GET", base + "/stat?path=../etc/passwd", "", http.StatusBadRequest},
		{"GET", base + "/stat", "", http.StatusBadRequest},
		{"POST", base + "/mkdir", `{"path":"x/../../etc/evil"}`, http.StatusBadRequest},
		{"POST", base + "/mkdir", `{"path":`, http.StatusBadRequest},
		{"POST", base + "/move", `{"from":"x/x","to":"../../tmp/x"}`, http.StatusBadRequest},
		{"POST", base + "/move", `{"from":"x/x","to":"x/y","force":true}`, http.StatusBadRequest},
		{"DELETE", base + "/files?path=x/../..&recursive=true", "", http.StatusBadRequest},
		{"DELETE", base + "/files?path=/&recursive=true", "", http.StatusBadRequest},
		{"DELETE", base + "/files?path=/work&recursive=true", "", http.StatusBadRequest},
		{"DELETE", d.url + "/v1/sandboxes/sb-000000000000/files?path=x&recursive=true", "", http.StatusNotFound},
	} {
		if status, b := rawCall(t, tc.method, tc.url, h, tc.body); status != tc.want || !strings.Contains(string(b), `"code"`) {
			t.Errorf("%s %s %s: %d %s, want %d", tc.method, tc.url, tc.body, status, b, tc.want)
		}
	}
	if status, b := rawCall(t, "DELETE", base+"/files?path=x&recursive=true", map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: "wrong"}, ""); status != http.StatusForbidden {
		t.Errorf("remove with a wrong token: %d %s", status, b)
	}
	if out := execOK(t, d, sb, "cat /work/x/x; test -e /etc/evil || test -e /tmp/x || echo clean"); out != "x\nclean\n" {
		t.Fatalf("after refused calls: %q", out)
	}
}
