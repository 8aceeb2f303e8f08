package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// tmux is a tmux server of the test's own (its own socket), whose one
// window is the terminal a person would type in.
type tmux struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T, cols, rows int, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tmux is not installed (scripts/install-deps.sh installs it with INSTALL_E2E=1)")
		}
		t.Skip("tmux is not installed")
	}
	tm := &tmux{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	tm.run("-f", "/dev/null", "new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), command)
	t.Cleanup(func() { exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the window shows.
func (tm *tmux) screen() string { return tm.run("capture-pane", "-p", "-t", "0") }

// keys types keys (tmux's names: "Enter", "C-c").
func (tm *tmux) keys(keys ...string) { tm.run(append([]string{"send-keys", "-t", "0"}, keys...)...) }

// waitScreen waits until the window shows a line for which ok holds.
func (tm *tmux) waitScreen(what string, ok func(line string) bool) {
	tm.t.Helper()
	if !tm.screenWithin(2*time.Minute, ok) {
		tm.t.Fatalf("the terminal shows no %s:\n%s", what, tm.screen())
	}
}

// screenWithin reports whether the window shows a line for which ok holds
// within d.
func (tm *tmux) screenWithin(d time.Duration, ok func(line string) bool) bool {
	tm.t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, l := range strings.Split(tm.screen(), "\n") {
			if ok(strings.TrimRight(l, " ")) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// prompt reports a line that is bash's prompt (trailing blanks trimmed),
// with nothing typed after it.
func prompt(l string) bool { return strings.HasSuffix(l, "#") || strings.HasSuffix(l, "$") }

// TestShellTmux drives `cove shell` in tmux as a person would: a prompt,
// a command's output, ^C, a resize that tput sees, and exit 3 giving the
// CLI's exit status.
func TestShellTmux(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	dir := t.TempDir()
	exitFile := filepath.Join(dir, "exit")
	script := filepath.Join(dir, "shell.sh")
	env := ""
	for _, kv := range []string{"COVE_URL=" + d.url, "COVE_API_KEY=" + d.key, "COVE_SANDBOX_TOKEN=" + sb.token, "HOME=" + dir, "XDG_CONFIG_HOME=" + dir} {
		env += "export " + shellQuote(kv) + "\n"
	}
	body := "#!/bin/sh\n" + env + shellQuote(suite.bin) + " shell " + sb.id + "\necho EXIT=$? > " + shellQuote(exitFile) + "\nsleep 600\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	tm := newTmux(t, 100, 30, script)
	tm.waitScreen("prompt", prompt)

	tm.keys("echo $((6*7))x", "Enter")
	tm.waitScreen("the command's output", func(l string) bool { return l == "42x" })

	tm.keys("tput cols; stty size", "Enter")
	tm.waitScreen("the first width", func(l string) bool { return l == "100" })

	// ^C interrupts the foreground command; the shell lives on.
	tm.keys("sleep 100; echo not-interrupted", "Enter")
	time.Sleep(300 * time.Millisecond) // let the sleep start; ^C before it would only cut the line
	tm.keys("C-c")
	tm.keys("echo $((1+1))y", "Enter")
	tm.waitScreen("the shell after ^C", func(l string) bool { return l == "2y" })
	if strings.Contains(tm.screen(), "\nnot-interrupted") {
		t.Errorf("^C did not interrupt the sleep:\n%s", tm.screen())
	}

	// The resize reaches the sandbox after cove shell's SIGWINCH, which
	// may be handled after keys typed at once: ask again until it has.
	tm.run("resize-window", "-t", "0", "-x", "120", "-y", "30")
	for try := 0; ; try++ {
		tm.keys("clear; tput cols", "Enter")
		if tm.screenWithin(2*time.Second, func(l string) bool { return l == "120" }) {
			break
		}
		if try == 30 {
			t.Fatalf("the terminal shows no new width:\n%s", tm.screen())
		}
	}

	tm.keys("exit 3", "Enter")
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(exitFile)
		if strings.TrimSpace(string(b)) == "EXIT=3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cove shell's status: %q, want EXIT=3; the terminal:\n%s", b, tm.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestShellPiped: without a local terminal cove shell still works, on a
// terminal of the default size, with the input as it comes.
func TestShellPiped(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.bin, "shell", sb.id, "--user", "user")
	cmd.Env = append(cliEnv(d, t.TempDir()), "COVE_SANDBOX_TOKEN="+sb.token)
	cmd.Stdin = strings.NewReader("whoami; stty size; echo $((2+3))q\nexit 4\n")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Fatalf("cove shell: %v, want exit status 4\n%s", err, out)
	}
	for _, want := range []string{"user\r\n24 80\r\n5q\r\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// termOutput reads a terminal session's output as it comes.
type termOutput struct {
	mu   sync.Mutex
	buf  strings.Builder
	done chan error
}

func readTerm(s *client.TerminalSession) *termOutput {
	o := &termOutput{done: make(chan error, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := s.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			o.mu.Unlock()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				o.done <- err
				return
			}
		}
	}()
	return o
}

func (o *termOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func (o *termOutput) waitFor(t *testing.T, s string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(o.String(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output:\n%s", s, o.String())
		}
	}
}

// TestTerminalAPI drives the WebSocket through pkg/client: output, a
// resize that stty sees, a signal that interrupts a sleep while the shell
// lives on, and a terminal as user. Closing it leaves nothing running.
func TestTerminalAPI(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	s, err := d.c.Terminal(ctx, sb.id, sb.token, client.TerminalOptions{Cols: 90, Rows: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := readTerm(s)
	s.Write([]byte("stty size; echo $((3*5))z\n"))
	out.waitFor(t, "20 90")
	out.waitFor(t, "15z")
	if err := s.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("stty size\n"))
	out.waitFor(t, "43 132")

	s.Write([]byte("sleep 4242 & sleep 100\n"))
	waitProcs(t, d, sb, "sleep 100", true)
	if err := s.Signal("INT"); err != nil {
		t.Fatal(err)
	}
	waitProcs(t, d, sb, "sleep 100", false)
	s.Write([]byte("echo $((2*21))alive\n"))
	out.waitFor(t, "42alive")

	// The hang-up takes the shell and its job along.
	s.Close()
	waitProcs(t, d, sb, "sleep 4242", false)
	waitProcs(t, d, sb, "bash -l", false)

	// As user.
	u, err := d.c.Terminal(ctx, sb.id, sb.token, client.TerminalOptions{User: "user", Cmd: []string{"sh", "-c", "whoami; pwd; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	uout := readTerm(u)
	if err := <-uout.done; err != nil {
		t.Fatal(err)
	}
	if st, err := u.Wait(); err != nil || st.ExitCode != 5 {
		t.Errorf("exit %+v, %v; want 5", st, err)
	}
	if got := uout.String(); !strings.Contains(got, "user\r\n") {
		t.Errorf("whoami as user: %q", got)
	}
}

// waitProcs waits until a process whose command line is args runs (or,
// with want false, none does) in the sandbox.
func waitProcs(t *testing.T, d *daemon, sb sandbox, args string, want bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ps := execOK(t, d, sb, "ps -eo args=")
		found := false
		for _, l := range strings.Split(ps, "\n") {
			if strings.TrimSpace(l) == args {
				found = true
			}
		}
		if found == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %q running: %v, want %v; ps:\n%s", args, found, want, ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTerminalRefused: what a terminal refuses, before the upgrade, with
// the statuses of the rest of the API.
func TestTerminalRefused(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	other := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name   string
		c      *client.Client
		id     string
		token  string
		o      client.TerminalOptions
		target error
	}{
		{"cols over the bound", d.c, sb.id, sb.token, client.TerminalOptions{Cols: 5000}, client.ErrBadRequest},
		{"no such user", d.c, sb.id, sb.token, client.TerminalOptions{User: "nobody-here"}, client.ErrBadRequest},
		{"no such command", d.c, sb.id, sb.token, client.TerminalOptions{Cmd: []string{"no-such-cmd"}}, client.ErrBadRequest},
		{"unknown sandbox", d.c, "sb-000000000000", sb.token, client.TerminalOptions{}, client.ErrNotFound},
		{"wrong token", d.c, sb.id, other.token, client.TerminalOptions{}, client.ErrForbidden},
		{"wrong API key", client.New(d.url, "wrong"), sb.id, sb.token, client.TerminalOptions{}, client.ErrUnauthorized},
	} {
		s, err := tc.c.Terminal(ctx, tc.id, tc.token, tc.o)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, tc.target) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.target)
		}
	}
	// Cols of 0 from the client mean the default; on the wire they are a 400.
	code, body := rawCall(t, "GET", d.url+"/v1/sandboxes/"+sb.id+"/pty?cols=0",
		map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: sb.token}, "")
	if code != 400 {
		t.Errorf("cols=0: %d %s, want 400", code, body)
	}
}

// TestTerminalBranch: a terminal is its connection's. A branch child finds
// the source's terminal gone with the old connection, and its processes
// end there; the source's terminal carries on.
func TestTerminalBranch(t *testing.T) {
	d := suite.shared
	src := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := d.c.Terminal(ctx, src.id, src.token, client.TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := readTerm(s)
	s.Write([]byte("sleep 4545\n"))
	waitProcs(t, d, src, "sleep 4545", true)

	res, err := d.c.Branch(ctx, src.id, src.token, apitype.BranchRequest{N: 1})
	if err != nil {
		t.Fatalf("branch: %v\n%s", err, d.logTail())
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, res.Tag) })
	kid := sandbox{res.Children[0].ID, res.Children[0].Token}
	defer d.c.DeleteSandbox(context.Background(), kid.id)
	waitProcs(t, d, kid, "sleep 4545", false)
	waitProcs(t, d, kid, "bash -l", false)

	// The source's terminal is as it was.
	waitProcs(t, d, src, "sleep 4545", true)
	s.Signal("INT")
	s.Write([]byte("echo $((7*6))src\n"))
	out.waitFor(t, "42src")
}
