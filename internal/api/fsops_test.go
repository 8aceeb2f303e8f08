package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// tree lists what is under dir, with each file's size, to see that a
// refused call changed nothing.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, strings.TrimPrefix(p, dir)+" "+fi.Mode().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFSOps(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	base := "/v1/sandboxes/" + sb.ID

	const content = "some content\n"
	var fi apitype.FileInfo
	s.call(t, "PUT", base+"/files?path=a/f", content, tok(sb), http.StatusOK, &fi)
	sum := sha256.Sum256([]byte(content))
	if fi.SHA256 != hex.EncodeToString(sum[:]) || fi.Size != int64(len(content)) {
		t.Errorf("put answer %+v, want sha256 %x", fi, sum)
	}
	s.call(t, "POST", base+"/mkdir", `{"path":"d/e/f","mode":"0700"}`, tok(sb), http.StatusOK, &fi)
	if fi.Type != "dir" || fi.Mode != "0700" || !strings.HasSuffix(fi.Path, "/d/e/f") {
		t.Errorf("mkdir answer %+v", fi)
	}
	s.call(t, "POST", base+"/mkdir", `{"path":"d/e/f"}`, tok(sb), http.StatusOK, nil) // exists: fine
	fi = apitype.FileInfo{}
	s.call(t, "GET", base+"/stat?path=a/f", "", tok(sb), http.StatusOK, &fi)
	if fi.Type != "file" || fi.SHA256 != "" {
		t.Errorf("stat answer %+v", fi)
	}
	s.call(t, "PUT", base+"/files?path=d/g", "g", tok(sb), http.StatusOK, nil)

	other := s.create(t)
	bad := []struct {
		name, method, path, body string
		h                        hdr
		want                     int
	}{
		{"stat without path", "GET", base + "/stat", "", tok(sb), http.StatusBadRequest},
		{"stat ..", "GET", base + "/stat?path=../etc", "", tok(sb), http.StatusBadRequest},
		{"stat missing", "GET", base + "/stat?path=nope", "", tok(sb), http.StatusNotFound},
		{"stat unknown id", "GET", "/v1/sandboxes/sb-000000000000/stat?path=a", "", tok(sb), http.StatusNotFound},
		{"stat wrong token", "GET", base + "/stat?path=a", "", tok(other), http.StatusForbidden},
		{"stat no token", "GET", base + "/stat?path=a", "", nil, http.StatusForbidden},
		{"stat no key", "GET", base + "/stat?path=a", "", hdr{"Authorization": ""}, http.StatusUnauthorized},
		{"mkdir malformed", "POST", base + "/mkdir", `{"path":`, tok(sb), http.StatusBadRequest},
		{"mkdir unknown field", "POST", base + "/mkdir", `{"path":"x","parents":true}`, tok(sb), http.StatusBadRequest},
		{"mkdir empty body", "POST", base + "/mkdir", "", tok(sb), http.StatusBadRequest},
		{"mkdir no path", "POST", base + "/mkdir", `{}`, tok(sb), http.StatusBadRequest},
		{"mkdir ..", "POST", base + "/mkdir", `{"path":"x/../../y"}`, tok(sb), http.StatusBadRequest},
		{"mkdir bad mode", "POST", base + "/mkdir", `{"path":"x","mode":"rwx"}`, tok(sb), http.StatusBadRequest},
		{"mkdir over a file", "POST", base + "/mkdir", `{"path":"a/f"}`, tok(sb), http.StatusConflict},
		{"mkdir wrong token", "POST", base + "/mkdir", `{"path":"x"}`, tok(other), http.StatusForbidden},
		{"move malformed", "POST", base + "/move", `[1]`, tok(sb), http.StatusBadRequest},
		{"move no to", "POST", base + "/move", `{"from":"a/f"}`, tok(sb), http.StatusBadRequest},
		{"move ..", "POST", base + "/move", `{"from":"a/f","to":"../f"}`, tok(sb), http.StatusBadRequest},
		{"move missing", "POST", base + "/move", `{"from":"nope","to":"x"}`, tok(sb), http.StatusNotFound},
		{"move onto a file", "POST", base + "/move", `{"from":"a/f","to":"d/g"}`, tok(sb), http.StatusConflict},
		// The fake runtime's agent runs on this host: the paths stay relative.
		{"move the work dir", "POST", base + "/move", `{"from":".","to":"w2"}`, tok(sb), http.StatusBadRequest},
		{"move unknown id", "POST", "/v1/sandboxes/sb-000000000000/move", `{"from":"a/f","to":"x"}`, tok(sb), http.StatusNotFound},
		{"remove without path", "DELETE", base + "/files", "", tok(sb), http.StatusBadRequest},
		{"remove ..", "DELETE", base + "/files?path=../x&recursive=true", "", tok(sb), http.StatusBadRequest},
		{"remove bad recursive", "DELETE", base + "/files?path=d&recursive=yes", "", tok(sb), http.StatusBadRequest},
		{"remove non-empty", "DELETE", base + "/files?path=d", "", tok(sb), http.StatusConflict},
		{"remove missing", "DELETE", base + "/files?path=nope", "", tok(sb), http.StatusNotFound},
		{"remove wrong token", "DELETE", base + "/files?path=a/f", "", tok(other), http.StatusForbidden},
	}
	dir := s.rt.WorkDir(sb.ID)
	before := tree(t, dir)
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			b := s.call(t, tc.method, tc.path, tc.body, tc.h, tc.want, nil)
			var e apitype.ErrorBody
			if err := json.Unmarshal(b, &e); err != nil || e.Error == "" || e.Code == "" {
				t.Errorf("error body %s", b)
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused call changed the tree:\n%v\n%v", before, after)
			}
		})
	}

	s.call(t, "POST", base+"/move", `{"from":"a/f","to":"d/g","overwrite":true}`, tok(sb), http.StatusOK, &fi)
	if !strings.HasSuffix(fi.Path, "/d/g") || fi.Size != int64(len(content)) {
		t.Errorf("move answer %+v", fi)
	}
	s.call(t, "DELETE", base+"/files?path=d&recursive=true", "", tok(sb), http.StatusNoContent, nil)
	s.call(t, "GET", base+"/stat?path=d", "", tok(sb), http.StatusNotFound, nil)
}
