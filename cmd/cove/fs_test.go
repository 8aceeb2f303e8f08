package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// fsFake answers the fs routes for sandbox sb1 with token tok, recording
// each call as "METHOD /route?query body".
type fsFake struct {
	mu    sync.Mutex
	calls []string
}

func (f *fsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		apitype.MoveRequest
		Path string `json:"path"` // mkdir's
	}
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.calls = append(f.calls, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/sb1")+"?"+r.URL.RawQuery)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(apitype.ErrorBody{Error: msg, Code: code})
	}
	if r.Header.Get(apitype.SandboxTokenHeader) != "tok" {
		fail(http.StatusForbidden, apitype.CodeForbidden, "wrong token")
		return
	}
	q := r.URL.Query()
	switch {
	case r.URL.Path == "/v1/sandboxes/sb1":
		json.NewEncoder(w).Encode(apitype.SandboxInfo{ID: "sb1", Status: apitype.StatusRunning})
	case r.URL.Path == "/v1/sandboxes/sb1/stat" && q.Get("path") == "missing":
		fail(http.StatusNotFound, apitype.CodeNotFound, "lstat /work/missing: no such file or directory")
	case r.URL.Path == "/v1/sandboxes/sb1/stat":
		json.NewEncoder(w).Encode(apitype.FileInfo{Path: "/work/" + q.Get("path"), Type: "symlink", Size: 4, Mode: "0777", Target: "/etc"})
	case r.URL.Path == "/v1/sandboxes/sb1/mkdir":
		json.NewEncoder(w).Encode(apitype.FileInfo{Path: "/work/" + body.Path, Type: "dir", Mode: "0755"})
	case r.URL.Path == "/v1/sandboxes/sb1/move" && !body.Overwrite:
		fail(http.StatusConflict, apitype.CodeConflict, "rename: file exists: pass overwrite to replace it")
	case r.URL.Path == "/v1/sandboxes/sb1/move":
		json.NewEncoder(w).Encode(apitype.FileInfo{Path: "/work/" + body.To, Type: "file"})
	case r.URL.Path == "/v1/sandboxes/sb1/files" && r.Method == http.MethodDelete && q.Get("recursive") != "true":
		fail(http.StatusConflict, apitype.CodeConflict, "directory not empty")
	case r.URL.Path == "/v1/sandboxes/sb1/files" && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		fail(http.StatusNotFound, apitype.CodeNotFound, "no route")
	}
}

func TestFSCmd(t *testing.T) {
	fake := &fsFake{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_API_KEY", "key")
	t.Setenv("COVE_SANDBOX_TOKEN", "tok")

	tests := []struct {
		args    []string
		want    []string // in the output
		wantErr error
		calls   []string
	}{
		{[]string{"fs", "stat", "sb1", "l"}, []string{"PATH", "/work/l -> /etc", "symlink", "0777"}, nil,
			[]string{"GET /stat?path=l"}},
		{[]string{"fs", "stat", "--json", "sb1", "a", "b"}, []string{`"path": "/work/a"`, `"path": "/work/b"`}, nil,
			[]string{"GET /stat?path=a", "GET /stat?path=b"}},
		{[]string{"fs", "stat", "sb1", "missing", "b"}, nil, client.ErrNotFound, []string{"GET /stat?path=missing", "GET ?"}}, // the sandbox exists: the path does not
		{[]string{"fs", "mkdir", "-m", "0700", "sb1", "a/b/c"}, []string{"/work/a/b/c", "dir"}, nil, []string{"POST /mkdir?"}},
		{[]string{"fs", "mkdir", "-m", "rwx", "sb1", "a"}, nil, usageError{}, nil},
		{[]string{"fs", "mv", "sb1", "a", "b"}, nil, client.ErrConflict, []string{"POST /move?"}},
		{[]string{"fs", "mv", "-f", "sb1", "a", "b"}, []string{"/work/b"}, nil, []string{"POST /move?"}},
		{[]string{"fs", "mv", "sb1", "a"}, nil, usageError{}, nil},
		{[]string{"fs", "rm", "sb1", "d"}, nil, client.ErrConflict, []string{"DELETE /files?path=d"}},
		{[]string{"fs", "rm", "-r", "sb1", "d", "e"}, nil, nil, []string{"DELETE /files?path=d&recursive=true", "DELETE /files?path=e&recursive=true"}},
		{[]string{"fs", "rm", "sb1"}, nil, usageError{}, nil},
		{[]string{"fs", "stat", "--sandbox-token", "bad", "sb1", "a"}, nil, client.ErrForbidden, []string{"GET /stat?path=a"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fake.calls = nil
			out, err := runCLI(t, tt.args...)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != nil:
				var ue usageError
				if _, isUsage := tt.wantErr.(usageError); isUsage && !errors.As(err, &ue) || !isUsage && !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output %q lacks %q", out, w)
				}
			}
			if strings.Join(fake.calls, "\n") != strings.Join(tt.calls, "\n") {
				t.Errorf("calls %q, want %q", fake.calls, tt.calls)
			}
		})
	}
}
