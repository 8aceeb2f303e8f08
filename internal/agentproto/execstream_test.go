package agentproto

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// ExecStream of the stub: Shell "bad" fails before the start; otherwise
// each argument is a line of stdout, and "err:X" one of stderr.
func (stubHandler) ExecStream(_ context.Context, req ExecRequest, out *ExecOutput) (ExecStatus, error) {
	if req.Shell == "bad" {
		return ExecStatus{}, Errorf(CodeInvalid, "bad request")
	}
	for _, a := range req.Args {
		if s, ok := strings.CutPrefix(a, "err:"); ok {
			out.Writer(Stderr).Write([]byte(s))
			continue
		}
		out.Writer(Stdout).Write([]byte(a))
	}
	return ExecStatus{ExitCode: len(req.Args)}, nil
}

// blockingExec writes one chunk, then waits for the host's cancel.
type blockingExec struct {
	stubHandler
	canceled chan struct{}
}

func (b blockingExec) ExecStream(ctx context.Context, _ ExecRequest, out *ExecOutput) (ExecStatus, error) {
	out.Writer(Stdout).Write([]byte("first"))
	<-ctx.Done()
	close(b.canceled)
	return ExecStatus{}, nil
}

type chunk struct {
	stream byte
	data   string
}

func TestExecStream(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, stubHandler{}) })
	ctx := boundedCtx(t)
	tests := []struct {
		name     string
		req      ExecRequest
		want     []chunk
		wantExit int
		wantCode string
	}{
		{name: "no output", req: ExecRequest{}, wantExit: 0},
		{name: "both streams in order", req: ExecRequest{Args: []string{"a", "err:b", "c"}},
			want: []chunk{{Stdout, "a"}, {Stderr, "b"}, {Stdout, "c"}}, wantExit: 3},
		{name: "refused before the start", req: ExecRequest{Shell: "bad"}, wantCode: CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []chunk
			st, err := c.ExecStream(ctx, tt.req, func(stream byte, p []byte) error {
				got = append(got, chunk{stream, string(p)})
				return nil
			})
			if tt.wantCode != "" {
				if CodeOf(err) != tt.wantCode {
					t.Fatalf("ExecStream = %v, want code %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.ExitCode != tt.wantExit {
				t.Errorf("exit = %d, want %d", st.ExitCode, tt.wantExit)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("chunks = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("chunk %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// A host that stops taking output ends the call, which the agent sees as
// a cancel.
func TestExecStreamHostGoesAway(t *testing.T) {
	t.Parallel()
	h := blockingExec{canceled: make(chan struct{})}
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, h) })
	ctx := boundedCtx(t)
	stop := errors.New("enough")
	_, err := c.ExecStream(ctx, ExecRequest{Args: []string{"x"}}, func(byte, []byte) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("ExecStream = %v, want the callback's error", err)
	}
	select {
	case <-h.canceled:
	case <-ctx.Done():
		t.Fatal("the agent side was never canceled")
	}
}

// floodExec writes as fast as it can until the host's cancel.
type floodExec struct {
	stubHandler
	returned chan struct{}
}

func (f floodExec) ExecStream(ctx context.Context, _ ExecRequest, out *ExecOutput) (ExecStatus, error) {
	defer close(f.returned)
	buf := make([]byte, 64<<10)
	for ctx.Err() == nil {
		out.Writer(Stdout).Write(buf)
	}
	return ExecStatus{}, nil
}

// A host that goes away while the agent waits for room in the stream's
// window does not leave the agent's write waiting.
func TestExecStreamHostGoesAwayWindowFull(t *testing.T) {
	t.Parallel()
	h := floodExec{returned: make(chan struct{})}
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, h) })
	ctx := boundedCtx(t)
	stop := errors.New("enough")
	_, err := c.ExecStream(ctx, ExecRequest{Args: []string{"x"}}, func(byte, []byte) error {
		time.Sleep(200 * time.Millisecond) // the agent fills the window meanwhile
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("ExecStream = %v, want the callback's error", err)
	}
	select {
	case <-h.returned:
	case <-ctx.Done():
		t.Fatal("the agent's write is still waiting for the host that left")
	}
}
