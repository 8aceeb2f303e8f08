package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

func TestExec(t *testing.T) {
	e := newTestEnv(t)
	if err := os.Mkdir(filepath.Join(e.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "sub", "hello.sh"), []byte("#!/bin/sh\necho hello from $0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "noexec.sh"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        agentproto.ExecRequest
		stdout     string // exact, unless contains is set
		stderr     string // substring
		exitCode   int
		stdoutPart bool
	}{
		{name: "argv", req: agentproto.ExecRequest{Args: []string{"echo", "a b", "c"}}, stdout: "a b c\n"},
		{name: "argv not split by a shell", req: agentproto.ExecRequest{Args: []string{"printf", "%s|", "$HOME", "*"}}, stdout: "$HOME|*|"},
		{name: "shell", req: agentproto.ExecRequest{Shell: "echo one; echo two | tr a-z A-Z"}, stdout: "one\nTWO\n"},
		{name: "default cwd", req: agentproto.ExecRequest{Args: []string{"pwd"}}, stdout: e.dir + "\n"},
		{name: "relative cwd", req: agentproto.ExecRequest{Args: []string{"pwd"}, Cwd: "sub"}, stdout: e.dir + "/sub\n"},
		{name: "absolute cwd", req: agentproto.ExecRequest{Args: []string{"pwd"}, Cwd: os.TempDir()}, stdout: filepath.Clean(os.TempDir()) + "\n"},
		{name: "relative program", req: agentproto.ExecRequest{Args: []string{"./hello.sh"}, Cwd: "sub"}, stdout: "hello from ./hello.sh\n"},
		{name: "default env", req: agentproto.ExecRequest{Shell: `echo "$PATH|$HOME|$LANG|$TERM"`},
			stdout: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|/root|C.UTF-8|xterm\n"},
		{name: "env added and overriding", req: agentproto.ExecRequest{Shell: `echo "$FOO|$HOME|$LANG"`, Env: []string{"FOO=bar=baz", "HOME=/home/u"}},
			stdout: "bar=baz|/home/u|C.UTF-8\n"},
		{name: "agent env not leaked", req: agentproto.ExecRequest{Shell: `echo "[$COVE_TEST_SECRET]"`}, stdout: "[]\n"},
		{name: "PATH from request used for lookup", req: agentproto.ExecRequest{Args: []string{"hello.sh"}, Env: []string{"PATH=" + e.dir + "/sub"}},
			stdout: "hello from " + e.dir + "/sub/hello.sh\n"},
		{name: "stdin", req: agentproto.ExecRequest{Args: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("shout\n")}, stdout: "SHOUT\n"},
		{name: "no stdin is /dev/null", req: agentproto.ExecRequest{Args: []string{"wc", "-c"}}, stdout: "0\n"},
		{name: "stderr", req: agentproto.ExecRequest{Shell: "echo oops >&2"}, stderr: "oops\n"},
		{name: "exit code", req: agentproto.ExecRequest{Shell: "exit 3"}, exitCode: 3},
		{name: "killed by signal", req: agentproto.ExecRequest{Shell: "kill -9 $$"}, exitCode: -1},
		{name: "command not found", req: agentproto.ExecRequest{Args: []string{"no-such-command-cove"}}, stderr: "no-such-command-cove: command not found", exitCode: 127},
		{name: "missing path", req: agentproto.ExecRequest{Args: []string{"/nonexistent/prog"}}, stderr: "command not found", exitCode: 127},
		{name: "not executable", req: agentproto.ExecRequest{Args: []string{"./noexec.sh"}}, stderr: "permission denied", exitCode: 126},
		{name: "shell command not found", req: agentproto.ExecRequest{Shell: "no-such-command-cove"}, stderr: "not found", exitCode: 127},
	}
	t.Setenv("COVE_TEST_SECRET", "leak")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.c.Exec(testCtx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Stdout != tt.stdout || !strings.Contains(r.Stderr, tt.stderr) || r.ExitCode != tt.exitCode {
				t.Errorf("got stdout %q, stderr %q, exit %d; want stdout %q, stderr containing %q, exit %d",
					r.Stdout, r.Stderr, r.ExitCode, tt.stdout, tt.stderr, tt.exitCode)
			}
			if r.TimedOut || r.Truncated {
				t.Errorf("timed out %v, truncated %v", r.TimedOut, r.Truncated)
			}
		})
	}
}

func TestExecInvalid(t *testing.T) {
	e := newTestEnv(t)
	if err := os.WriteFile(filepath.Join(e.dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  agentproto.ExecRequest
		code string
	}{
		{"empty", agentproto.ExecRequest{}, agentproto.CodeInvalid},
		{"args and shell", agentproto.ExecRequest{Args: []string{"true"}, Shell: "true"}, agentproto.CodeInvalid},
		{"negative timeout", agentproto.ExecRequest{Args: []string{"true"}, TimeoutMs: -1}, agentproto.CodeInvalid},
		{"bad env", agentproto.ExecRequest{Args: []string{"true"}, Env: []string{"NOEQUALS"}}, agentproto.CodeInvalid},
		{"missing cwd", agentproto.ExecRequest{Args: []string{"true"}, Cwd: "nope"}, agentproto.CodeNotFound},
		{"cwd is a file", agentproto.ExecRequest{Args: []string{"true"}, Cwd: "file"}, agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.Exec(testCtx(t), tt.req)
			wantCode(t, err, tt.code)
		})
	}
}

func TestExecRecreatesWorkDir(t *testing.T) {
	e := newTestEnv(t)
	if err := os.RemoveAll(e.dir); err != nil {
		t.Fatal(err)
	}
	r, err := e.c.Exec(testCtx(t), agentproto.ExecRequest{Args: []string{"pwd"}})
	if err != nil || r.Stdout != e.dir+"\n" {
		t.Fatalf("exec = %+v, %v", r, err)
	}
}

// TestExecTimeoutKillsGroup checks that the timeout kills the command's
// whole process group, a background grandchild included.
func TestExecTimeoutKillsGroup(t *testing.T) {
	e := newTestEnv(t)
	start := time.Now()
	r, err := e.c.Exec(testCtx(t), agentproto.ExecRequest{
		Shell:     "echo before; sleep 100 & echo $! > bg.pid; sleep 100",
		TimeoutMs: 300,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut || r.ExitCode != -1 || r.Stdout != "before\n" {
		t.Errorf("exec = %+v; want timed out, exit -1, output kept", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("exec took %v", d)
	}
	processGone(t, readPid(t, filepath.Join(e.dir, "bg.pid")))
}

// TestExecCancelKillsGroup checks that the host giving up on a call ends
// the command like a timeout does.
func TestExecCancelKillsGroup(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
	defer cancel()
	r, err := e.c.Exec(ctx, agentproto.ExecRequest{Shell: "sleep 100 & echo $! > bg.pid; sleep 100"})
	// The stream is only half closed by a cancel, so the client may still
	// read the agent's answer.
	if err == nil && (r.ExitCode != -1 || r.TimedOut) || err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec = %+v, %v; want killed, or deadline exceeded", r, err)
	}
	processGone(t, readPid(t, filepath.Join(e.dir, "bg.pid")))
}

// TestExecBackgroundChild checks that a background child holding the
// output pipes does not keep the call from returning once the command
// exits, and that the child is left running.
func TestExecBackgroundChild(t *testing.T) {
	e := newTestEnv(t)
	start := time.Now()
	r, err := e.c.Exec(testCtx(t), agentproto.ExecRequest{Shell: "sleep 30 & echo $! > bg.pid; echo started"})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("exec took %v with a background child", d)
	}
	if r.ExitCode != 0 || r.TimedOut || r.Stdout != "started\n" {
		t.Errorf("exec = %+v", r)
	}
	pid := readPid(t, filepath.Join(e.dir, "bg.pid"))
	if err := processAlive(pid); err != nil {
		t.Errorf("background child: %v", err)
	}
	killProcess(pid)
	processGone(t, pid)
}

// A background child that keeps writing to the inherited stdout after the
// call returned must not be killed by SIGPIPE.
func TestExecBackgroundChildKeepsWriting(t *testing.T) {
	e := newTestEnv(t)
	// The child writes only once the call has returned, however slowly the
	// shell gets to its exit on a loaded machine.
	gate := filepath.Join(e.dir, "returned")
	shell := fmt.Sprintf("(while [ ! -e %s ]; do sleep 0.05; done; echo late; echo late >&2; sleep 0.2; touch alive) & echo started", gate)
	r, err := e.c.Exec(testCtx(t), agentproto.ExecRequest{Shell: shell})
	if err != nil || r.Stdout != "started\n" {
		t.Fatalf("exec = %+v, %v", r, err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	alive := filepath.Join(e.dir, "alive")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(alive); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the background child died writing to its stdout after the call returned")
		}
	}
}

func TestExecTruncated(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name      string
		shell     string
		stdout    int
		stderr    int
		truncated bool
	}{
		{"at the limit", "head -c 16777216 /dev/zero | tr '\\0' a", agentproto.MaxOutput, 0, false},
		{"stdout over", "head -c 16777300 /dev/zero | tr '\\0' a; echo done >&2", agentproto.MaxOutput, 5, true},
		{"stderr over", "head -c 20000000 /dev/zero | tr '\\0' a >&2", 0, agentproto.MaxOutput, true},
		// Output that escapes to six bytes a byte is cut to fit the answer's frame.
		{"binary", "head -c 20000000 /dev/zero", 2 * agentproto.MaxOutput / 6, 0, true},
		{"markup", "head -c 16000000 /dev/zero | tr '\\0' '<'", 2 * agentproto.MaxOutput / 6, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.c.Exec(testCtx(t), agentproto.ExecRequest{Shell: tt.shell})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Stdout) != tt.stdout || len(r.Stderr) != tt.stderr || r.Truncated != tt.truncated || r.ExitCode != 0 {
				t.Errorf("stdout %d bytes, stderr %d, truncated %v, exit %d; want %d, %d, %v, 0",
					len(r.Stdout), len(r.Stderr), r.Truncated, r.ExitCode, tt.stdout, tt.stderr, tt.truncated)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"a/prog", 0o755}, {"b/prog", 0o755}, {"a/plain", 0o644}, {"b/plain", 0o755}, {"a/only", 0o644}} {
		p := filepath.Join(dir, f.name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	path := dir + "/a::" + dir + "/b"
	tests := []struct {
		file, want string
		perm       bool // want a permission error
		notFound   bool
	}{
		{file: "prog", want: dir + "/a/prog"},
		{file: "plain", want: dir + "/b/plain"}, // skips the non-executable one
		{file: "only", perm: true},
		{file: "missing", notFound: true},
		{file: "a", notFound: true}, // dir/a exists, but "." (the empty entry) is never searched
	}
	for _, tt := range tests {
		got, err := lookPath(tt.file, path, dir)
		switch {
		case tt.perm:
			if !errors.Is(err, os.ErrPermission) {
				t.Errorf("lookPath(%q) = %q, %v; want permission error", tt.file, got, err)
			}
		case tt.notFound:
			if !errors.Is(err, errNotFound) {
				t.Errorf("lookPath(%q) = %q, %v; want not found", tt.file, got, err)
			}
		case err != nil || got != tt.want:
			t.Errorf("lookPath(%q) = %q, %v; want %q", tt.file, got, err, tt.want)
		}
	}
}

// A reader that has not run yet, or has output left in its pipe, is not
// settled: Exec waits for it rather than dropping the command's output.
func TestPipeReaderSettled(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("output")); err != nil {
		t.Fatal(err)
	}
	var dst capBuffer
	p := &pipeReader{r: r, dst: &dst}
	if p.settled() {
		t.Fatal("settled before reading anything")
	}
	go p.run()
	deadline := time.Now().Add(10 * time.Second)
	for !p.settled() {
		if time.Now().After(deadline) {
			t.Fatal("never settled")
		}
		time.Sleep(time.Millisecond)
	}
	if got := dst.String(); got != "output" {
		t.Fatalf("settled with %q in the buffer, want %q", got, "output")
	}
}
