package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// testEnv is an Agent served over loopback TCP to a real client.
type testEnv struct {
	a   *Agent
	c   *agentproto.Client
	dir string // the agent's work directory
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	a := New(Config{
		WorkDir:  dir,
		ProcDir:  filepath.Join(filepath.Dir(dir), "procs"),
		Hostname: func() (string, error) { return "sandbox-test", nil },
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- agentproto.Serve(ctx, l, a, a.log) }()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := agentproto.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		<-served
		a.Close()
	})
	return &testEnv{a: a, c: c, dir: dir}
}

// ctx returns a context that ends with the test, bounded so that a hang
// fails the test rather than the whole run.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := agentproto.CodeOf(err); got != code {
		t.Fatalf("error = %v (code %q), want code %q", err, got, code)
	}
}

// processGone waits for pid to be gone. A zombie counts as gone: whether
// it is reaped promptly is up to the host's init, not the agent.
func processGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			// The state follows the parenthesised command name.
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i:]), ") Z") {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("process %d is still running", pid)
}

// processAlive reports whether pid is running.
func processAlive(pid int) error {
	return syscall.Kill(pid, 0)
}

func killProcess(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// readPid reads a pid a test command wrote to a file.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

func TestPing(t *testing.T) {
	e := newTestEnv(t)
	before := time.Now()
	r, err := e.c.Ping(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != agentproto.Version || r.Hostname != "sandbox-test" || r.UptimeMs < 0 {
		t.Errorf("ping = %+v", r)
	}
	if got := time.Unix(0, r.TimeUnixNano); got.Before(before.Add(-time.Second)) || got.After(time.Now().Add(time.Second)) {
		t.Errorf("ping time %v, want about %v", got, before)
	}
}

func TestNewCreatesWorkDir(t *testing.T) {
	e := newTestEnv(t)
	if fi, err := os.Stat(e.dir); err != nil || !fi.IsDir() {
		t.Fatalf("work dir: %v", err)
	}
}

func TestResolve(t *testing.T) {
	a := &Agent{workDir: "/tmp/w"}
	tests := []struct {
		in, want, code string
	}{
		{in: "a/b", want: "/tmp/w/a/b"},
		{in: "./a//b/", want: "/tmp/w/a/b"},
		{in: ".", want: "/tmp/w"},
		{in: "/etc/x", want: "/etc/x"},
		{in: "/a/./b", want: "/a/b"},
		{in: "", code: agentproto.CodeInvalid},
		{in: "..", code: agentproto.CodeInvalid},
		{in: "../x", code: agentproto.CodeInvalid},
		{in: "a/../../x", code: agentproto.CodeInvalid},
		{in: "/tmp/w/../../etc", code: agentproto.CodeInvalid},
		{in: "a\x00b", code: agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		got, err := a.resolve(tt.in)
		if tt.code != "" {
			if agentproto.CodeOf(err) != tt.code {
				t.Errorf("resolve(%q) = %q, %v; want code %q", tt.in, got, err, tt.code)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolve(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestDotDotRejected checks that every call taking a path refuses "..".
func TestDotDotRejected(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	for _, p := range []string{"../x", "a/../../x", e.dir + "/../x"} {
		_, err := e.c.Put(ctx, agentproto.PutRequest{Path: p}, strings.NewReader("x"))
		wantCode(t, err, agentproto.CodeInvalid)
		_, _, err = e.c.Get(ctx, agentproto.GetRequest{Path: p})
		wantCode(t, err, agentproto.CodeInvalid)
		_, err = e.c.List(ctx, agentproto.ListRequest{Path: p})
		wantCode(t, err, agentproto.CodeInvalid)
		_, err = e.c.Wait(ctx, agentproto.WaitRequest{Path: p, Text: "x"})
		wantCode(t, err, agentproto.CodeInvalid)
		_, err = e.c.Exec(ctx, agentproto.ExecRequest{Args: []string{"true"}, Cwd: p})
		wantCode(t, err, agentproto.CodeInvalid)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.dir), "x")); err == nil {
		t.Error("a file was written outside the work directory")
	}
}
