package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// streamed is what a streamed exec sent.
type streamed struct {
	stdout, stderr bytes.Buffer
	order          []byte // the stream of each chunk, in order
}

func (s *streamed) add(stream byte, p []byte) error {
	s.order = append(s.order, stream)
	if stream == agentproto.Stderr {
		s.stderr.Write(p)
	} else {
		s.stdout.Write(p)
	}
	return nil
}

func TestExecStream(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name           string
		req            agentproto.ExecRequest
		stdout, stderr string // stderr: a substring
		want           agentproto.ExecStatus
	}{
		{name: "stdout and stderr", req: agentproto.ExecRequest{Shell: "echo out; echo err >&2"}, stdout: "out\n", stderr: "err\n"},
		{name: "stdin", req: agentproto.ExecRequest{Args: []string{"cat"}, Stdin: []byte("in")}, stdout: "in"},
		{name: "exit code", req: agentproto.ExecRequest{Shell: "exit 3"}, want: agentproto.ExecStatus{ExitCode: 3}},
		{name: "signal", req: agentproto.ExecRequest{Shell: "kill -TERM $$"}, want: agentproto.ExecStatus{ExitCode: -1, Signal: "SIGTERM"}},
		{name: "timeout", req: agentproto.ExecRequest{Shell: "sleep 30", TimeoutMs: 200},
			want: agentproto.ExecStatus{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}},
		{name: "not found", req: agentproto.ExecRequest{Args: []string{"no-such-command-cove"}}, stderr: "command not found",
			want: agentproto.ExecStatus{ExitCode: 127}},
		// Far over the buffered exec's cap: nothing is cut.
		{name: "over the cap", req: agentproto.ExecRequest{Shell: "head -c 40000000 /dev/zero | tr '\\0' a"},
			stdout: strings.Repeat("a", 40000000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got streamed
			st, err := e.c.ExecStream(testCtx(t), tt.req, got.add)
			if err != nil {
				t.Fatal(err)
			}
			st.DurationMs = 0
			if st != tt.want {
				t.Errorf("status = %+v, want %+v", st, tt.want)
			}
			if got.stdout.String() != tt.stdout {
				t.Errorf("stdout = %.80q (%d bytes), want %.80q", got.stdout.String(), got.stdout.Len(), tt.stdout)
			}
			if !strings.Contains(got.stderr.String(), tt.stderr) {
				t.Errorf("stderr = %q, want it to contain %q", got.stderr.String(), tt.stderr)
			}
		})
	}
}

func TestExecStreamInvalid(t *testing.T) {
	e := newTestEnv(t)
	_, err := e.c.ExecStream(testCtx(t), agentproto.ExecRequest{Args: []string{"true"}, Cwd: "/nonexistent"}, (&streamed{}).add)
	wantCode(t, err, agentproto.CodeNotFound)
	_, err = e.c.ExecStream(testCtx(t), agentproto.ExecRequest{}, (&streamed{}).add)
	wantCode(t, err, agentproto.CodeInvalid)
}

// Output arrives as it is produced: the first line before the command
// has printed the second.
func TestExecStreamLive(t *testing.T) {
	e := newTestEnv(t)
	gate := filepath.Join(e.dir, "gate")
	var lines []string
	_, err := e.c.ExecStream(testCtx(t), agentproto.ExecRequest{
		Shell: "echo first; while [ ! -e gate ]; do sleep 0.05; done; echo second",
	}, func(_ byte, p []byte) error {
		lines = append(lines, string(p))
		if string(p) == "first\n" {
			// The command waits for this file: it can only end once the
			// first line has been received.
			return writeFile(gate)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(lines, "") != "first\nsecond\n" {
		t.Errorf("output = %q", lines)
	}
}

// The host going away mid-stream kills the command's process group.
func TestExecStreamHostGoesAway(t *testing.T) {
	e := newTestEnv(t)
	stop := errors.New("enough")
	_, err := e.c.ExecStream(testCtx(t), agentproto.ExecRequest{
		Shell: "sleep 100 & echo $! > bg.pid; while :; do echo tick; sleep 0.05; done",
	}, func(byte, []byte) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("ExecStream = %v, want the callback's error", err)
	}
	processGone(t, readPid(t, filepath.Join(e.dir, "bg.pid")))
}

// A host that reads slowly slows the command instead of filling the
// agent's memory: the command cannot get far ahead of what was read.
func TestExecStreamBackpressure(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	first := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.c.ExecStream(ctx, agentproto.ExecRequest{
			Shell: "head -c 1000000000 /dev/zero; echo finished > done",
		}, func(byte, []byte) error {
			select {
			case <-first:
			default:
				close(first)
			}
			<-ctx.Done() // never read on
			return ctx.Err()
		})
		done <- err
	}()
	<-first
	time.Sleep(500 * time.Millisecond)
	if fileExists(filepath.Join(e.dir, "done")) {
		t.Fatal("the command ran to its end while the host read nothing")
	}
	cancel()
	<-done
}

func writeFile(path string) error { return os.WriteFile(path, nil, 0o644) }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
