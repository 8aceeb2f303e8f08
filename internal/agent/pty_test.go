package agent

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/proc"
)

// ptyOutput reads a terminal's output as a test waits for it.
type ptyOutput struct {
	p   *agentproto.PTYStream
	buf strings.Builder
}

func readPTY(p *agentproto.PTYStream) *ptyOutput { return &ptyOutput{p: p} }

func (o *ptyOutput) String() string { return o.buf.String() }

// waitFor reads until the output holds s; the test's context bounds it.
func (o *ptyOutput) waitFor(t *testing.T, s string) {
	t.Helper()
	b := make([]byte, 4096)
	for !strings.Contains(o.buf.String(), s) {
		n, err := o.p.Read(b)
		o.buf.Write(b[:n])
		if err != nil {
			t.Fatalf("no %q in the terminal's output (%v):\n%s", s, err, o.buf.String())
		}
	}
}

// rest reads the output to its end.
func (o *ptyOutput) rest() error {
	_, err := io.Copy(&o.buf, o.p)
	return err
}

func TestPTY(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	p, err := e.c.OpenPTY(ctx, agentproto.PTYRequest{Args: []string{"sh"}, Cols: 80, Rows: 24, Env: []string{"PS1=$ "}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := readPTY(p)
	type step struct {
		send  string
		ctrl  *agentproto.PTYControl
		want  string
		check func()
	}
	var sleepPid int
	steps := []step{
		{send: "echo $TERM; tty; stty size\n", want: "24 80"},
		{send: "echo ${TERM}-seen\n", want: agentproto.DefaultTerm + "-seen"},
		{ctrl: &agentproto.PTYControl{Type: agentproto.PTYResize, Cols: 120, Rows: 40}},
		{send: "stty size\n", want: "40 120"},
		{send: "sleep 100 & echo bg=$!=gb; wait\n", want: "=gb\r\n"},
		{check: func() {
			s := out.String()
			s = s[:strings.LastIndex(s, "=gb\r\n")]
			n, _ := strconv.Atoi(s[strings.LastIndex(s, "bg=")+3:])
			sleepPid = n
		}},
		// A signal reaches the foreground: the shell waiting on its job.
		{ctrl: &agentproto.PTYControl{Type: agentproto.PTYSignal, Signal: "INT"}},
		{send: "echo still-here\n", want: "still-here"},
	}
	for _, s := range steps {
		switch {
		case s.send != "":
			if _, err := p.Write([]byte(s.send)); err != nil {
				t.Fatal(err)
			}
		case s.ctrl != nil:
			if err := p.Control(*s.ctrl); err != nil {
				t.Fatal(err)
			}
		case s.check != nil:
			s.check()
		}
		if s.want != "" {
			out.waitFor(t, s.want)
		}
	}
	if sleepPid == 0 || !proc.Alive(sleepPid) {
		t.Fatalf("background sleep %d not running", sleepPid)
	}
	p.Write([]byte("exit 3\n"))
	if err := out.rest(); err != nil {
		t.Fatalf("read to the end: %v", err)
	}
	if ex, ok := p.Exit(); !ok || ex.ExitCode != 3 {
		t.Errorf("exit %+v, %v; want code 3", ex, ok)
	}
	// The shell's job went with its terminal.
	if !proc.WaitExit(sleepPid, 5*time.Second) {
		t.Errorf("the shell's background sleep %d outlived its terminal", sleepPid)
	}
}

// TestPTYHangUp: the host closing the stream ends everything on the
// terminal, even what ignores SIGHUP.
func TestPTYHangUp(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	p, err := e.c.OpenPTY(ctx, agentproto.PTYRequest{Cols: 80, Rows: 24,
		Args: []string{"sh", "-c", "trap '' HUP; echo pid=$$; sleep 100 & echo job=$!; echo listed; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	out := readPTY(p)
	out.waitFor(t, "listed")
	var pids []int
	for _, f := range strings.Fields(strings.NewReplacer("pid=", "", "job=", "", "listed", "").Replace(out.String())) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("pids %v from %q", pids, out.String())
	}
	p.Close()
	for _, pid := range pids {
		if !proc.WaitExit(pid, 10*time.Second) {
			t.Errorf("process %d still runs after the hang-up", pid)
		}
	}
}

func TestPTYExitSignal(t *testing.T) {
	e := newTestEnv(t)
	p, err := e.c.OpenPTY(testCtx(t), agentproto.PTYRequest{Cols: 80, Rows: 24, Args: []string{"sh", "-c", "kill -TERM $$"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := readPTY(p)
	if err := out.rest(); err != nil {
		t.Fatal(err)
	}
	if ex, _ := p.Exit(); ex.ExitCode != -1 || ex.Signal != "SIGTERM" {
		t.Errorf("exit %+v, want SIGTERM", ex)
	}
}

func TestPTYBadRequest(t *testing.T) {
	e := newTestEnv(t)
	for name, req := range map[string]agentproto.PTYRequest{
		"zero size":  {Cols: 0, Rows: 24},
		"huge size":  {Cols: 80, Rows: 60000},
		"no command": {Cols: 80, Rows: 24, Args: []string{"no-such-command-cove"}},
		"no user":    {Cols: 80, Rows: 24, User: "nobody-here"},
		"bad term":   {Cols: 80, Rows: 24, Term: "x=y"},
	} {
		_, err := e.c.OpenPTY(testCtx(t), req)
		if agentproto.CodeOf(err) != agentproto.CodeInvalid {
			t.Errorf("%s: %v, want an invalid-request error", name, err)
		}
	}
}

func TestPTYAsUser(t *testing.T) {
	needRoot(t)
	e := newTestEnv(t)
	p, err := e.c.OpenPTY(testCtx(t), agentproto.PTYRequest{Cols: 80, Rows: 24, User: testUser, Cwd: "/",
		Args: []string{"sh", "-c", "echo $(id -un) home=$HOME"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := readPTY(p)
	out.rest()
	if s := out.String(); !strings.Contains(s, testUser+" home=/nonexistent") {
		t.Errorf("as %s: %q", testUser, s)
	}
}

// TestPTYTypeSignal: where the kernel cannot name the foreground group,
// ^C typed on the terminal reaches it.
func TestPTYTypeSignal(t *testing.T) {
	a := New(Config{WorkDir: t.TempDir()})
	defer a.Close()
	p, err := a.StartPTY(testCtx(t), agentproto.PTYRequest{Cols: 80, Rows: 24, Args: []string{"sh", "-c", "sleep 100; echo rest"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	time.Sleep(100 * time.Millisecond) // let sh start the sleep
	term := p.(*ptyTerm)
	if sent, err := term.typeSignal(syscall.SIGINT); !sent || err != nil {
		t.Fatalf("typeSignal(SIGINT) = %v, %v", sent, err)
	}
	if sent, _ := term.typeSignal(syscall.SIGTERM); sent {
		t.Error("typeSignal(SIGTERM) typed something: no character sends it")
	}
	out, _ := io.ReadAll(p)
	if ex := p.Exit(); ex.Signal != "SIGINT" || strings.Contains(string(out), "rest") {
		t.Errorf("exit %+v, output %q; want SIGINT before the rest", ex, out)
	}
}

// TestPTYNoLeak: terminals that end, or are hung up, leave no descriptor
// and no goroutine behind.
func TestPTYNoLeak(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	cycle := func(hangUp bool) {
		p, err := e.c.OpenPTY(ctx, agentproto.PTYRequest{Cols: 80, Rows: 24, Args: []string{"sh", "-c", "echo up; read x"}})
		if err != nil {
			t.Fatal(err)
		}
		out := readPTY(p)
		out.waitFor(t, "up")
		if !hangUp {
			p.Write([]byte("\n"))
			if err := out.rest(); err != nil {
				t.Fatal(err)
			}
		}
		p.Close()
	}
	cycle(false) // the first use starts what lives on (the poller)
	fds, gs := countFDs(t), runtime.NumGoroutine()
	for i := range 6 {
		cycle(i%2 == 0)
	}
	deadline := time.Now().Add(10 * time.Second)
	for (countFDs(t) > fds || runtime.NumGoroutine() > gs) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := countFDs(t); n > fds {
		t.Errorf("%d descriptors open after the terminals, %d before", n, fds)
	}
	if n := runtime.NumGoroutine(); n > gs {
		t.Errorf("%d goroutines after the terminals, %d before", n, gs)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
