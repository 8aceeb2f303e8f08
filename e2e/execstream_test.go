package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// maxRSSGrowth bounds how much a 100 MiB streamed exec may grow the
// daemon's and the agent's resident memory: far below the output's size,
// so that any buffering of it whole shows.
const maxRSSGrowth = 32 << 20

// execStream runs shell in sb as a streamed exec on the shared daemon.
func execStream(ctx context.Context, sb sandbox, req apitype.ExecRequest, stdout, stderr io.Writer) (apitype.ExitStatus, error) {
	return suite.shared.c.ExecStream(ctx, sb.id, sb.token, req, stdout, stderr)
}

// streamCtx bounds a test's streamed execs: generous for TCG.
func streamCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pid returns the daemon's process id.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// vmRSS returns a host process's resident set size in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	return statusRSS(t, string(b))
}

// statusRSS is the sum of the VmRSS lines of /proc/PID/status texts.
func statusRSS(t *testing.T, status string) int64 {
	t.Helper()
	var total int64
	found := false
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			total += kb << 10
			found = true
		}
	}
	if !found {
		t.Fatalf("no VmRSS in %q", status)
	}
	return total
}

// agentRSS returns the resident memory of the sandbox's agent processes
// (the init and the server), read from inside by another exec.
func agentRSS(t *testing.T, sb sandbox) int64 {
	t.Helper()
	return statusRSS(t, execOK(t, suite.shared, sb, "for p in $(pgrep -x cove-agent); do cat /proc/$p/status; done"))
}

// rssSampler records the daemon's and the agent's RSS at points of a test.
type rssSampler struct {
	t                     *testing.T
	sb                    sandbox
	daemonBase, agentBase int64
	daemonPeak, agentPeak int64
	samples               []string
}

func newRSSSampler(t *testing.T, sb sandbox) *rssSampler {
	s := &rssSampler{t: t, sb: sb, daemonBase: vmRSS(t, suite.shared.pid()), agentBase: agentRSS(t, sb)}
	s.samples = append(s.samples, "before: daemon "+mib(s.daemonBase)+", agent "+mib(s.agentBase))
	return s
}

func (s *rssSampler) sample(when string) {
	d, a := vmRSS(s.t, suite.shared.pid()), agentRSS(s.t, s.sb)
	s.daemonPeak, s.agentPeak = max(s.daemonPeak, d), max(s.agentPeak, a)
	s.samples = append(s.samples, when+": daemon "+mib(d)+", agent "+mib(a))
}

func (s *rssSampler) check() {
	s.t.Log("RSS:\n  " + strings.Join(s.samples, "\n  "))
	if g := s.daemonPeak - s.daemonBase; g > maxRSSGrowth {
		s.t.Errorf("the daemon's RSS grew by %s, over %s", mib(g), mib(maxRSSGrowth))
	}
	if g := s.agentPeak - s.agentBase; g > maxRSSGrowth {
		s.t.Errorf("the agent's RSS grew by %s, over %s", mib(g), mib(maxRSSGrowth))
	}
}

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

// countWriter counts what it is given and calls at each time the count
// passes the next of marks.
type countWriter struct {
	n     int64
	marks []int64
	at    func(n int64)
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	for len(w.marks) > 0 && w.n >= w.marks[0] {
		w.marks = w.marks[1:]
		w.at(w.n)
	}
	return len(p), nil
}

// TestExecStreamLarge: a foreground exec streams 100 MiB to its end with
// the right byte count and exit code, the daemon's and the agent's memory
// flat before, during and after.
func TestExecStreamLarge(t *testing.T) {
	sb := newSandbox(t)
	ctx := streamCtx(t)
	const size = 100 << 20
	gen := func(n int) string {
		return "yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c " + strconv.Itoa(n) + "; exit 7"
	}
	// A first, smaller stream warms both ends up: what the first call
	// allocates for good is not growth.
	if _, err := execStream(ctx, sb, apitype.ExecRequest{Shell: gen(8 << 20)}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	rss := newRSSSampler(t, sb)
	// The samples are taken from inside the writer: the stream, and with
	// it the command, waits meanwhile, mid-way.
	out := &countWriter{marks: []int64{size / 4, size / 2, size * 3 / 4}, at: func(n int64) {
		rss.sample("after " + mib(n))
	}}
	var errOut bytes.Buffer
	st, err := execStream(ctx, sb, apitype.ExecRequest{Shell: gen(size), TimeoutSecs: 600}, out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	rss.sample("after")
	if out.n != size || st.ExitCode != 7 || st.TimedOut || errOut.Len() != 0 {
		t.Errorf("streamed %d bytes (want %d), exit %+v, stderr %q", out.n, size, st, errOut.String())
	}
	rss.check()
}

// lineWriter sends each line written to it on a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// gated is a command that prints "first", then waits for the file gate
// before it prints "second" and ends: it can only end once a test that
// has seen "first" makes the file.
func gated(gate string) string {
	return "echo first; while [ ! -e " + gate + " ]; do sleep 0.1; done; echo second"
}

// TestExecStreamLive: output arrives as it is produced — the first line
// before the command ends, which it cannot do before the test has read it.
func TestExecStreamLive(t *testing.T) {
	sb := newSandbox(t)
	ctx := streamCtx(t)
	lines := &lineWriter{lines: make(chan string, 10)}
	done := make(chan error, 1)
	go func() {
		st, err := execStream(ctx, sb, apitype.ExecRequest{Shell: gated("/tmp/gate")}, lines, io.Discard)
		if err == nil && st.ExitCode != 0 {
			t.Errorf("exit %+v", st)
		}
		done <- err
		close(lines.lines)
	}()
	if l := <-lines.lines; l != "first" {
		t.Fatalf("first line %q", l)
	}
	execOK(t, suite.shared, sb, "touch /tmp/gate")
	if l := <-lines.lines; l != "second" {
		t.Errorf("second line %q", l)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestExecStreamEnds: stdout and stderr are told apart; an exit code, a
// signal's death and a timeout are reported as such.
func TestExecStreamEnds(t *testing.T) {
	sb := newSandbox(t)
	ctx := streamCtx(t)
	tests := []struct {
		name           string
		req            apitype.ExecRequest
		stdout, stderr string
		want           apitype.ExitStatus
	}{
		{name: "streams apart", req: apitype.ExecRequest{Shell: "echo out; echo err >&2; echo out2; exit 3"},
			stdout: "out\nout2\n", stderr: "err\n", want: apitype.ExitStatus{ExitCode: 3}},
		{name: "signal", req: apitype.ExecRequest{Shell: "echo going; kill -TERM $$"},
			stdout: "going\n", want: apitype.ExitStatus{ExitCode: -1, Signal: "SIGTERM"}},
		{name: "timeout", req: apitype.ExecRequest{Shell: "echo waiting; sleep 60", TimeoutSecs: 1},
			stdout: "waiting\n", want: apitype.ExitStatus{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}},
		{name: "stdin", req: apitype.ExecRequest{Args: []string{"cat"}, Stdin: "fed"}, stdout: "fed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			st, err := execStream(ctx, sb, tt.req, &out, &errOut)
			if err != nil {
				t.Fatal(err)
			}
			st.DurationMs = 0
			if st != tt.want || out.String() != tt.stdout || errOut.String() != tt.stderr {
				t.Errorf("got %+v, stdout %q, stderr %q; want %+v, %q, %q", st, out.String(), errOut.String(), tt.want, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestExecStreamClientGone: a client that goes away mid-stream leaves no
// process behind in the sandbox: the command's whole group is killed,
// its background child too.
func TestExecStreamClientGone(t *testing.T) {
	sb := newSandbox(t)
	ctx, cancel := context.WithCancel(streamCtx(t))
	first := make(chan struct{})
	var once sync.Once
	w := writerFunc(func(p []byte) (int, error) {
		once.Do(func() { close(first) })
		return len(p), nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := execStream(ctx, sb, apitype.ExecRequest{Shell: "sleep 1001 & while :; do echo tick; sleep 0.1; done"}, w, io.Discard)
		done <- err
	}()
	<-first
	// Both are there while the client reads: the loop's shell and the
	// background sleep. The bracket keeps pgrep from matching itself.
	if n := execOK(t, suite.shared, sb, "pgrep -f 'sleep 100[1]' | wc -l"); strings.TrimSpace(n) != "2" {
		t.Fatalf("%s processes of the command while streaming, want 2", strings.TrimSpace(n))
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled stream ended without an error")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := strings.TrimSpace(execOK(t, suite.shared, sb, "pgrep -af 'sleep 100[1]' || true"))
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command's processes outlived the client:\n%s", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestExecStreamOverCap: the buffered answer still caps at 16 MiB and says
// it truncated, while the stream of the same command delivers everything.
func TestExecStreamOverCap(t *testing.T) {
	sb := newSandbox(t)
	ctx := streamCtx(t)
	const size, cap16 = 20 << 20, 16 << 20
	shell := "yes abcdefghijklmnopqrstuvwxyz | head -c " + strconv.Itoa(size)
	res, err := suite.shared.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: shell, TimeoutSecs: 300})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Stdout) != cap16 {
		t.Errorf("buffered: %d bytes, truncated %v; want %d, truncated", len(res.Stdout), res.Truncated, cap16)
	}
	out := &countWriter{}
	st, err := execStream(ctx, sb, apitype.ExecRequest{Shell: shell, TimeoutSecs: 300}, out, io.Discard)
	if err != nil || st.ExitCode != 0 || out.n != size {
		t.Errorf("streamed: %d bytes, %+v, %v; want %d bytes, exit 0", out.n, st, err, size)
	}
}

// TestExecStreamCLI: `cove exec` prints output as the command produces it,
// keeps stdout and stderr apart and exits with the command's status.
func TestExecStreamCLI(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	home := t.TempDir()
	ctx := streamCtx(t)
	cmd := exec.CommandContext(ctx, suite.bin, "exec", "--sandbox-token", sb.token, "--shell", sb.id,
		gated("/tmp/cli-gate")+"; echo oops >&2; exit 3")
	cmd.Env = cliEnv(d, home)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if l, err := r.ReadString('\n'); l != "first\n" {
		t.Fatalf("cove exec's first line %q, %v", l, err)
	}
	// The command is still waiting: the first line came as produced.
	execOK(t, d, sb, "touch /tmp/cli-gate")
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	if string(rest) != "second\n" || errOut.String() != "oops\n" {
		t.Errorf("cove exec: stdout after the first line %q, stderr %q", rest, errOut.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("cove exec exited with %v, want status 3", err)
	}
}

// TestExecStreamSandboxDies: a sandbox that dies mid-stream ends the
// stream with an error record, which the client reports as 410.
func TestExecStreamSandboxDies(t *testing.T) {
	sb := newSandbox(t)
	var out bytes.Buffer
	_, err := execStream(streamCtx(t), sb, apitype.ExecRequest{Shell: "echo first; sleep 0.5; " + killInit(), TimeoutSecs: 60}, &out, io.Discard)
	if !errors.Is(err, client.ErrGone) {
		t.Errorf("stream of a sandbox that died = %v, want 410 gone", err)
	}
	if out.String() != "first\n" {
		t.Errorf("output before the death %q, want the first line", out.String())
	}
}
