package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// cliFakeDaemon is an in-memory stand-in for the daemon, enough for the
// commands' own logic: sandboxes with tokens, branch, exec that echoes its
// arguments and working directory (or exits with "exit N"), files, and
// one snapshot, py.
type cliFakeDaemon struct {
	mu     sync.Mutex
	next   int
	tokens map[string]string // sandbox id -> token
	files  map[string][]byte
	modes  map[string]string
}

func (f *cliFakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(apitype.ErrorBody{Error: msg, Code: code})
	}
	if r.Header.Get("Authorization") != "Bearer key" {
		fail(401, apitype.CodeUnauthorized, "wrong API key")
		return
	}
	if r.URL.Path == "/v1/snapshots" {
		json.NewEncoder(w).Encode([]apitype.SnapshotInfo{{Tag: "py", Image: "default"}})
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/sandboxes"), "/")
	id := ""
	if len(parts) > 1 {
		id = parts[1]
	}
	if id != "" {
		if _, ok := f.tokens[id]; !ok {
			fail(404, apitype.CodeNotFound, "no sandbox "+id)
			return
		}
		if len(parts) > 2 && r.Header.Get(apitype.SandboxTokenHeader) != f.tokens[id] {
			fail(403, apitype.CodeForbidden, "wrong sandbox token")
			return
		}
	}
	switch {
	case r.Method == "POST" && id == "":
		var req apitype.CreateSandboxRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(f.make(max(req.N, 1)))
	case strings.HasSuffix(r.URL.Path, "/branch"):
		var req apitype.BranchRequest
		json.NewDecoder(r.Body).Decode(&req)
		json.NewEncoder(w).Encode(apitype.BranchResponse{SnapshotInfo: apitype.SnapshotInfo{Tag: "br", BranchedFrom: id}, Children: f.make(req.N)})
	case r.Method == "GET" && id == "":
		out := []apitype.SandboxInfo{}
		for sid := range f.tokens {
			out = append(out, apitype.SandboxInfo{ID: sid, Status: "running"})
		}
		json.NewEncoder(w).Encode(out)
	case r.Method == "DELETE":
		delete(f.tokens, id)
		w.WriteHeader(204)
	case strings.HasSuffix(r.URL.Path, "/exec"):
		var req apitype.ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		res := apitype.ExecResponse{Stdout: strings.Join(req.Args, " ") + req.Shell + req.Env["K"] + req.Cwd}
		if len(req.Args) == 2 && req.Args[0] == "exit" {
			res.ExitCode, _ = strconv.Atoi(req.Args[1])
		}
		writeExec(w, r, res)
	case strings.HasSuffix(r.URL.Path, "/files") && r.Method == "PUT":
		p := r.URL.Query().Get("path")
		b, _ := io.ReadAll(r.Body)
		f.files[p], f.modes[p] = b, r.URL.Query().Get("mode")
		json.NewEncoder(w).Encode(apitype.FileInfo{Path: "/work/" + p, Size: int64(len(b)), Mode: f.modes[p]})
	case strings.HasSuffix(r.URL.Path, "/files") && r.Method == "GET":
		p := r.URL.Query().Get("path")
		b, ok := f.files[p]
		if !ok {
			fail(404, apitype.CodeNotFound, "no file "+p)
			return
		}
		w.Header().Set("X-File-Mode", f.modes[p])
		if !strings.HasPrefix(p, "/proc/") && p != "cut" {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
			return
		}
		// As the daemon sends a file of unknown size: chunked, with the
		// size procfs gives. "cut" is cut short, as when the agent fails.
		w.Header().Set("X-File-Size", "0")
		w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		if p == "cut" {
			panic(http.ErrAbortHandler)
		}
		w.Write(b[len(b)/2:])
	default:
		fail(404, apitype.CodeNotFound, "no route")
	}
}

// make makes n sandboxes.
func (f *cliFakeDaemon) make(n int) []apitype.SandboxInfo {
	var out []apitype.SandboxInfo
	for range n {
		f.next++
		sid := fmt.Sprintf("sb%d", f.next)
		f.tokens[sid] = "tok-" + sid
		out = append(out, apitype.SandboxInfo{ID: sid, Status: "running", Backend: "gvisor", Token: f.tokens[sid]})
	}
	return out
}

// startCLIFake starts a cliFakeDaemon and points cove at it, with an
// empty sandbox token store.
func startCLIFake(t *testing.T) (*cliFakeDaemon, string) {
	fake := &cliFakeDaemon{tokens: map[string]string{}, files: map[string][]byte{}, modes: map[string]string{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_TOKEN", "key") // the API key's old name
	t.Setenv("COVE_API_KEY", "")
	t.Setenv("COVE_SANDBOX_TOKEN", "")
	return fake, srv.URL
}

// runCLI runs cove with args and returns what it printed on stdout.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(""))
	_, err := root.ExecuteContextC(context.Background())
	if errOut.Len() > 0 {
		t.Logf("cove %s: stderr: %s", strings.Join(args, " "), errOut.String())
	}
	return out.String(), err
}

func TestCLIFlow(t *testing.T) {
	fake, url := startCLIFake(t)
	run := func(args ...string) (string, error) { return runCLI(t, args...) }

	out, err := run("create", "-n", "2", "-q")
	if err != nil || out != "sb1\nsb2\n" {
		t.Fatalf("create -q: %q, %v", out, err)
	}
	st, _ := defaultSandboxTokens()
	if tok, _ := st.get(url, "sb2"); tok != "tok-sb2" {
		t.Fatalf("token not saved: %q", tok)
	}

	if out, err := run("exec", "sb1", "-e", "K=v", "--", "echo", "-n", "hi"); err != nil || out != "echo -n hiv" {
		t.Errorf("exec: %q, %v", out, err)
	}
	if _, err := run("exec", "sb1", "exit", "3"); !errors.Is(err, exitError{3}) {
		t.Errorf("exec exit 3: err = %v", err)
	}
	if out, err := run("exec", "--json", "sb1", "exit", "3"); err != nil || !strings.Contains(out, `"exit_code": 3`) {
		t.Errorf("exec --json: %q, %v", out, err)
	}
	if _, err := run("exec", "--sandbox-token", "bad", "sb1", "true"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("exec with a bad token: %v", err)
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "in.sh")
	os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if _, err := run("cp", src, "sb1:in.sh"); err != nil {
		t.Fatalf("cp up: %v", err)
	}
	if fake.modes["in.sh"] != "0755" {
		t.Errorf("uploaded mode %q, want 0755", fake.modes["in.sh"])
	}
	// Into a directory: keeps the name, replacing the file there.
	if _, err := run("cp", "sb1:in.sh", dir+"/"); err != nil {
		t.Errorf("cp down into a dir: %v", err)
	}
	dst := filepath.Join(dir, "out.sh")
	if _, err := run("cp", "sb1:in.sh", dst); err != nil {
		t.Fatalf("cp down: %v", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "#!/bin/sh\necho hi\n" {
		t.Errorf("downloaded %q", b)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Errorf("downloaded mode %v", fi.Mode().Perm())
	}
	if out, err := run("cp", "sb1:in.sh", "-"); err != nil || out != "#!/bin/sh\necho hi\n" {
		t.Errorf("cp to stdout: %q, %v", out, err)
	}
	if _, err := run("cp", "sb1:nope", dst); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("cp of a missing file: %v", err)
	}
	// A file whose size is unknown until read comes whole; one cut short
	// is an error and leaves nothing behind.
	fake.files["/proc/cpuinfo"] = []byte(strings.Repeat("processor\t: 0\n", 1000))
	if out, err := run("cp", "sb1:/proc/cpuinfo", "-"); err != nil || out != string(fake.files["/proc/cpuinfo"]) {
		t.Errorf("cp of a procfs file: %d bytes, %v", len(out), err)
	}
	fake.files["cut"] = fake.files["/proc/cpuinfo"]
	if _, err := run("cp", "sb1:cut", filepath.Join(dir, "cut")); err == nil {
		t.Error("cp of a download cut short succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "cut")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a download cut short left a file: %v", err)
	}

	if _, err := run("kill", "sb1", "nope"); err == nil {
		t.Error("kill of an unknown sandbox succeeded")
	}
	if tok, _ := st.get(url, "sb1"); tok != "" {
		t.Error("kill left the token")
	}
	if _, err := run("exec", "sb1", "true"); err == nil {
		t.Error("exec into a killed sandbox succeeded")
	}

	// ls prunes tokens of sandboxes that are gone.
	delete(fake.tokens, "sb2")
	if out, err := run("ls", "-q"); err != nil || out != "" {
		t.Errorf("ls -q: %q, %v", out, err)
	}
	if tok, _ := st.get(url, "sb2"); tok != "" {
		t.Error("ls kept the token of a gone sandbox")
	}

	t.Setenv("COVE_TOKEN", "wrong")
	if _, err := run("ls"); !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "hint") {
		t.Errorf("ls with a wrong key: %v", err)
	}
}

// writeExec answers an exec buffered, or streamed when it accepts NDJSON.
func writeExec(w http.ResponseWriter, r *http.Request, res apitype.ExecResponse) {
	enc := json.NewEncoder(w)
	if r.Header.Get("Accept") != apitype.ContentTypeNDJSON {
		enc.Encode(res)
		return
	}
	w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
	enc.Encode(apitype.OutputEvent{Stream: "stdout", Data: res.Stdout})
	enc.Encode(apitype.OutputEvent{Exit: &apitype.ExitStatus{ExitCode: res.ExitCode}})
}
