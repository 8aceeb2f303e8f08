package agentproto

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// stubHandler answers every call at once.
type stubHandler struct{}

func (stubHandler) Ping(context.Context) (PingResult, error) {
	return PingResult{Version: Version}, nil
}
func (stubHandler) Exec(_ context.Context, req ExecRequest) (ExecResult, error) {
	return ExecResult{Stdout: string(rune('0' + len(req.Stdin)%10))}, nil
}
func (stubHandler) Eval(context.Context, EvalRequest) (EvalResult, error) { return EvalResult{}, nil }
func (stubHandler) Put(_ context.Context, _ PutRequest, r io.Reader) (FileInfo, error) {
	n, err := io.Copy(io.Discard, r)
	return FileInfo{Size: n}, err
}
func (stubHandler) Get(context.Context, GetRequest) (FileInfo, io.ReadCloser, error) {
	return FileInfo{}, nil, Errorf(CodeNotFound, "no file")
}
func (stubHandler) List(context.Context, ListRequest) (ListResult, error) { return ListResult{}, nil }
func (stubHandler) Wait(context.Context, WaitRequest) (WaitResult, error) { return WaitResult{}, nil }
func (stubHandler) Warm(context.Context) error                            { return nil }
func (stubHandler) Restored(context.Context, RestoredRequest) error       { return nil }

// pipeClient is a Client whose agent end is served by serve.
func pipeClient(t *testing.T, serve func(net.Conn)) *Client {
	t.Helper()
	host, guest := net.Pipe()
	go serve(guest)
	c, err := NewClient(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); guest.Close() })
	return c
}

func boundedCtx(t *testing.T) context.Context {
	// Generous: encoding tens of MiB of JSON is slow under the race
	// detector on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A request too large for a frame fails at once, before anything is sent.
func TestCallTooLarge(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, stubHandler{}) })
	ctx := boundedCtx(t)
	_, err := c.Exec(ctx, ExecRequest{Args: []string{"wc"}, Stdin: make([]byte, maxJSONFrame/4*3+1)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized exec = %v, want ErrFrameTooLarge", err)
	}
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"wc"}, Stdin: make([]byte, 1<<20)}); err != nil {
		t.Fatalf("a small exec after that: %v", err)
	}
}

// An agent that gives up on a call without reading all of it (an older
// agent refusing a frame, say) fails the call; it used to block the
// daemon for good, with the stream's window full.
func TestCallPeerStopsReading(t *testing.T) {
	c := pipeClient(t, func(conn net.Conn) {
		sess, err := yamux.Server(conn, muxConfig())
		if err != nil {
			return
		}
		defer sess.Close()
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			var hdr [5]byte
			io.ReadFull(st, hdr[:])
			st.Close() // refuse, unread
		}
	})
	ctx := boundedCtx(t)
	start := time.Now()
	_, err := c.Exec(ctx, ExecRequest{Args: []string{"wc"}, Stdin: make([]byte, 30<<20)})
	// The call must fail by itself, not by running into its deadline:
	// how soon depends on the machine's load, which a test cannot bound.
	if err == nil || ctx.Err() != nil {
		t.Fatalf("exec to an agent that stopped reading = %v after %s, want an error before the deadline", err, time.Since(start))
	}
}

// The agent skips a frame over its limit and says so, so that even a
// daemon with a larger limit gets an answer.
func TestServerRefusesHugeFrame(t *testing.T) {
	host, guest := net.Pipe()
	go ServeConn(context.Background(), guest, stubHandler{})
	sess, err := yamux.Client(host, muxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	const n = maxJSONFrame + 1
	go func() {
		var hdr [5]byte
		hdr[0] = frameJSON
		binary.BigEndian.PutUint32(hdr[1:], n)
		st.Write(hdr[:])
		io.CopyN(st, zeros{}, n)
	}()
	st.SetReadDeadline(time.Now().Add(20 * time.Second))
	var resp Response
	if err := ReadJSON(st, &resp); err != nil {
		t.Fatalf("no answer to an oversized frame: %v", err)
	}
	if resp.Error == nil || resp.Error.Code != CodeTooLarge {
		t.Fatalf("answer %+v, want code %q", resp, CodeTooLarge)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
