package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		maxPos int
		want   []string
		json   bool
		cwd    string
	}{
		{"flags first", []string{"--json", "a", "b"}, -1, []string{"a", "b"}, true, ""},
		{"flags interspersed", []string{"a", "--json", "b"}, -1, []string{"a", "b"}, true, ""},
		{"flags last", []string{"a", "b", "-json"}, -1, []string{"a", "b"}, true, ""},
		{"dashdash", []string{"a", "--", "--json"}, -1, []string{"a", "--json"}, false, ""},
		{"stdin dash", []string{"-", "id:x"}, -1, []string{"-", "id:x"}, false, ""},
		{"exec: command keeps its flags", []string{"id", "ls", "-la", "--json"}, 1, []string{"id", "ls", "-la", "--json"}, false, ""},
		{"exec: flags after id", []string{"id", "--cwd", "/tmp", "--", "ls", "-la"}, 1, []string{"id", "ls", "-la"}, false, "/tmp"},
		{"exec: flags before id", []string{"--json", "--cwd=/x", "id", "ls"}, 1, []string{"id", "ls"}, true, "/x"},
		{"exec: dashdash in command", []string{"id", "git", "log", "--", "f"}, 1, []string{"id", "git", "log", "--", "f"}, false, ""},
		{"exec: dashdash before id", []string{"--", "id", "ls"}, 1, []string{"id", "ls"}, false, ""},
		{"none", nil, -1, nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			js := fs.Bool("json", false, "")
			cwd := fs.String("cwd", "", "")
			got, err := parseArgs(fs, tt.args, tt.maxPos)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) || *js != tt.json || *cwd != tt.cwd {
				t.Errorf("got %q json=%v cwd=%q, want %q json=%v cwd=%q", got, *js, *cwd, tt.want, tt.json, tt.cwd)
			}
		})
	}
}

func TestParseArgsUnknownFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseArgs(fs, []string{"a", "--nope"}, -1); err == nil {
		t.Error("unknown flag after a positional argument was accepted")
	}
}

func TestBaseURL(t *testing.T) {
	tests := []struct{ flag, env, want string }{
		{"", "", defaultURL},
		{"", "http://h:1/", "http://h:1"},
		{"h:2", "http://h:1", "http://h:2"},
		{"https://h/cove/", "", "https://h/cove"},
	}
	for _, tt := range tests {
		t.Setenv("COVE_URL", tt.env)
		c := &common{url: tt.flag}
		if got := c.baseURL(); got != tt.want {
			t.Errorf("flag %q env %q: %q, want %q", tt.flag, tt.env, got, tt.want)
		}
	}
}

func TestKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	tests := []struct {
		name, flag, env, file string
		want                  string
		wantErr               string
	}{
		{"flag wins", "from-flag", "from-env", file, "from-flag", ""},
		{"env next", "", "from-env", file, "from-env", ""},
		{"file last", "", "", file, "from-file", ""},
		{"no file", "", "", filepath.Join(dir, "missing"), "", "make up"},
		{"empty file", "", "", empty, "", "is empty"},
		{"no file flag", "", "", "", "", "COVE_TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("COVE_TOKEN", tt.env)
			c := &common{apiKey: tt.flag, tokenFile: tt.file}
			got, err := c.key()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("key() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestTokenStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cove")
	st := &tokenStore{path: filepath.Join(dir, "tokens.json")}
	const d1, d2 = "http://a:8080", "http://b:8080"

	if tok, err := st.get(d1, "x"); err != nil || tok != "" {
		t.Fatalf("empty store: get = %q, %v", tok, err)
	}
	if err := st.add(d1, map[string]string{"s1": "t1", "s2": "t2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.add(d2, map[string]string{"s1": "other"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ daemon, id, want string }{
		{d1, "s1", "t1"}, {d1, "s2", "t2"}, {d2, "s1", "other"}, {d2, "s2", ""},
	} {
		if got, err := st.get(c.daemon, c.id); err != nil || got != c.want {
			t.Errorf("get(%s, %s) = %q, %v; want %q", c.daemon, c.id, got, err, c.want)
		}
	}

	fi, err := os.Stat(st.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}

	if err := st.remove(d1, "s1", "unknown"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.get(d1, "s1"); got != "" {
		t.Errorf("s1 still there after remove: %q", got)
	}
	if got, _ := st.get(d1, "s2"); got != "t2" {
		t.Errorf("remove took s2 too: %q", got)
	}

	// prune keeps what's live and what was saved after the list.
	asOf := time.Now()
	time.Sleep(2 * time.Millisecond)
	if err := st.add(d1, map[string]string{"new": "tn"}); err != nil {
		t.Fatal(err)
	}
	if err := st.prune(d1, map[string]bool{"live": true}, asOf); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.get(d1, "s2"); got != "" {
		t.Errorf("prune kept dead s2")
	}
	if got, _ := st.get(d1, "new"); got != "tn" {
		t.Errorf("prune dropped a token saved after the list")
	}
	if got, _ := st.get(d2, "s1"); got != "other" {
		t.Errorf("prune touched another daemon")
	}

	// No temporary files are left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "tokens.json" && e.Name() != "tokens.json.lock" {
			t.Errorf("stray file %s", e.Name())
		}
	}
}

func TestTokenStoreConcurrentAdds(t *testing.T) {
	st := &tokenStore{path: filepath.Join(t.TempDir(), "tokens.json")}
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := "s" + string(rune('a'+i))
			if err := st.add("d", map[string]string{id: "t" + id}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tf, err := st.read()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tf.Daemons["d"]); got != n {
		t.Errorf("%d tokens kept of %d added concurrently", got, n)
	}
}

func TestTokenStoreCorrupt(t *testing.T) {
	st := &tokenStore{path: filepath.Join(t.TempDir(), "tokens.json")}
	os.WriteFile(st.path, []byte("{not json"), 0o600)
	if _, err := st.get("d", "s"); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("get on a corrupt store: %v", err)
	}
}

func TestDefaultTokenStoreXDG(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/xdg")
	st, err := defaultTokenStore()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("/xdg", "cove", "tokens.json"); st.path != want {
		t.Errorf("path = %s, want %s", st.path, want)
	}
}

func TestTokenFor(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	st, _ := defaultTokenStore()
	st.add("http://d", map[string]string{"s1": "stored"})

	t.Setenv("COVE_SANDBOX_TOKEN", "")
	c := &common{}
	if got, err := c.tokenFor("http://d", "s1"); err != nil || got != "stored" {
		t.Errorf("from store: %q, %v", got, err)
	}
	if _, err := c.tokenFor("http://d", "s2"); err == nil || !strings.Contains(err.Error(), "--sandbox-token") {
		t.Errorf("unknown sandbox: %v", err)
	}
	t.Setenv("COVE_SANDBOX_TOKEN", "env")
	if got, _ := c.tokenFor("http://d", "s1"); got != "env" {
		t.Errorf("env override: %q", got)
	}
	c.sandboxToken = "flag"
	if got, _ := c.tokenFor("http://d", "s1"); got != "flag" {
		t.Errorf("flag override: %q", got)
	}
}

func TestFormatters(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {1499 * time.Millisecond, "1s"}, {90 * time.Second, "1m30s"},
		{2*time.Hour + 5*time.Minute, "2h5m"}, {50 * time.Hour, "2d2h"}, {-time.Second, "0s"},
	} {
		if got := fmtDuration(c.d); got != c.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {1 << 30, "1.0 GiB"},
	} {
		if got := fmtBytes(c.n); got != c.want {
			t.Errorf("fmtBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	now := time.Unix(1000, 0)
	if got := fmtUntil(now, 900); got != "expired" {
		t.Errorf("fmtUntil past = %q", got)
	}
	if got := fmtUntil(now, 1060); got != "1m0s" {
		t.Errorf("fmtUntil +60s = %q", got)
	}
	if got := mbPerSec(10e6, 2*time.Second); got != 5 {
		t.Errorf("mbPerSec = %v, want 5", got)
	}
}

func TestExplain(t *testing.T) {
	if err := explain(nil, "u"); err != nil {
		t.Errorf("explain(nil) = %v", err)
	}
	plain := errors.New("x")
	if err := explain(plain, "u"); err != plain {
		t.Errorf("explain changed an error it has no hint for: %v", err)
	}
}

// cliFakeDaemon is an in-memory stand-in for the daemon, enough for the
// commands' own logic: sandboxes with tokens, exec that echoes its
// arguments (or exits with "exit N"), and files.
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
		var out []apitype.SandboxInfo
		for range max(req.N, 1) {
			f.next++
			sid := fmt.Sprintf("sb%d", f.next)
			f.tokens[sid] = "tok-" + sid
			out = append(out, apitype.SandboxInfo{ID: sid, Status: "running", Backend: "gvisor", Token: f.tokens[sid]})
		}
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(out)
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
		res := apitype.ExecResponse{Stdout: strings.Join(req.Args, " ") + req.Shell + req.Env["K"]}
		if len(req.Args) == 2 && req.Args[0] == "exit" {
			res.ExitCode, _ = strconv.Atoi(req.Args[1])
		}
		json.NewEncoder(w).Encode(res)
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
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	default:
		fail(404, apitype.CodeNotFound, "no route")
	}
}

// captureStdout runs fn with os.Stdout redirected and returns what it
// printed.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	err = fn()
	os.Stdout = old
	w.Close()
	return <-done, err
}

func TestCLIFlow(t *testing.T) {
	fake := &cliFakeDaemon{tokens: map[string]string{}, files: map[string][]byte{}, modes: map[string]string{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_TOKEN", "key")
	t.Setenv("COVE_SANDBOX_TOKEN", "")
	ctx := context.Background()
	run := func(fn func(context.Context, []string) error, args ...string) (string, error) {
		return captureStdout(t, func() error { return fn(ctx, args) })
	}

	out, err := run(runCreate, "-n", "2", "-q")
	if err != nil || out != "sb1\nsb2\n" {
		t.Fatalf("create -q: %q, %v", out, err)
	}
	st, _ := defaultTokenStore()
	if tok, _ := st.get(srv.URL, "sb2"); tok != "tok-sb2" {
		t.Fatalf("token not saved: %q", tok)
	}

	if out, err := run(runExec, "sb1", "-e", "K=v", "--", "echo", "-n", "hi"); err != nil || out != "echo -n hiv" {
		t.Errorf("exec: %q, %v", out, err)
	}
	if _, err := run(runExec, "sb1", "exit", "3"); !errors.Is(err, exitError{3}) {
		t.Errorf("exec exit 3: err = %v", err)
	}
	if out, err := run(runExec, "--json", "sb1", "exit", "3"); err != nil || !strings.Contains(out, `"exit_code": 3`) {
		t.Errorf("exec --json: %q, %v", out, err)
	}
	if _, err := run(runExec, "--sandbox-token", "bad", "sb1", "true"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("exec with a bad token: %v", err)
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "in.sh")
	os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if _, err := run(runCp, src, "sb1:in.sh"); err != nil {
		t.Fatalf("cp up: %v", err)
	}
	if fake.modes["in.sh"] != "0755" {
		t.Errorf("uploaded mode %q, want 0755", fake.modes["in.sh"])
	}
	// Into a directory: keeps the name, replacing the file there.
	if _, err := run(runCp, "sb1:in.sh", dir+"/"); err != nil {
		t.Errorf("cp down into a dir: %v", err)
	}
	dst := filepath.Join(dir, "out.sh")
	if _, err := run(runCp, "sb1:in.sh", dst); err != nil {
		t.Fatalf("cp down: %v", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "#!/bin/sh\necho hi\n" {
		t.Errorf("downloaded %q", b)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Errorf("downloaded mode %v", fi.Mode().Perm())
	}
	if out, err := run(runCp, "sb1:in.sh", "-"); err != nil || out != "#!/bin/sh\necho hi\n" {
		t.Errorf("cp to stdout: %q, %v", out, err)
	}
	if _, err := run(runCp, "sb1:nope", dst); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("cp of a missing file: %v", err)
	}

	if _, err := run(runKill, "sb1", "nope"); err == nil {
		t.Error("kill of an unknown sandbox succeeded")
	}
	if tok, _ := st.get(srv.URL, "sb1"); tok != "" {
		t.Error("kill left the token")
	}
	if _, err := run(runExec, "sb1", "true"); err == nil {
		t.Error("exec into a killed sandbox succeeded")
	}

	// ls prunes tokens of sandboxes that are gone.
	delete(fake.tokens, "sb2")
	if out, err := run(runLs, "-q"); err != nil || out != "" {
		t.Errorf("ls -q: %q, %v", out, err)
	}
	if tok, _ := st.get(srv.URL, "sb2"); tok != "" {
		t.Error("ls kept the token of a gone sandbox")
	}

	t.Setenv("COVE_TOKEN", "wrong")
	if _, err := run(runLs); !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "hint") {
		t.Errorf("ls with a wrong key: %v", err)
	}
}
