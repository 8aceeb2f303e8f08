package agentproto

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// slowEval is a handler whose evals wait for their context, counting the
// cancels they see.
type slowEval struct {
	stubHandler
	started  chan struct{}
	canceled atomic.Int32
}

func (h *slowEval) Eval(ctx context.Context, _ EvalRequest) (EvalResult, error) {
	h.started <- struct{}{}
	<-ctx.Done()
	h.canceled.Add(1)
	return EvalResult{}, ctx.Err()
}

// TestLane: small calls share one stream, answered out of order: a ping
// answers while an eval is still running, and an eval's cancel reaches
// the agent's handler.
func TestLane(t *testing.T) {
	h := &slowEval{started: make(chan struct{}, 1)}
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, h) })
	ctx := boundedCtx(t)
	evalCtx, cancel := context.WithCancel(ctx)
	evalErr := make(chan error, 1)
	go func() {
		_, err := c.Eval(evalCtx, EvalRequest{Code: "1+1"})
		evalErr <- err
	}()
	<-h.started
	for range 10 {
		if _, err := c.Ping(ctx); err != nil {
			t.Fatalf("ping while an eval runs: %v", err)
		}
	}
	cancel()
	if err := <-evalErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled eval: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.canceled.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the agent's eval was not canceled")
		}
		time.Sleep(time.Millisecond)
	}
	if c.lane == nil || c.noLane {
		t.Fatal("the calls did not go on the lane")
	}
}

// TestLaneRefused: an agent without the lane (an older one, restored from
// a snapshot) refuses it, and the calls go on streams of their own.
func TestLaneRefused(t *testing.T) {
	c := pipeClient(t, func(conn net.Conn) {
		sess, err := yamux.Server(conn, muxConfig())
		if err != nil {
			return
		}
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				var hdr Header
				if err := ReadJSON(st, &hdr); err != nil {
					return
				}
				if hdr.Op != OpPing {
					writeResponse(st, nil, Errorf(CodeInvalid, "unknown op %q", hdr.Op))
					return
				}
				writeResponse(st, PingResult{Version: Version}, nil)
			}()
		}
	})
	ctx := boundedCtx(t)
	for range 3 {
		if _, err := c.Ping(ctx); err != nil {
			t.Fatalf("ping to an agent without the lane: %v", err)
		}
	}
	if !c.noLane {
		t.Fatal("the client did not give up on the lane")
	}
}

// TestLaneLargeRequest: a request over laneMaxRequest takes a stream of
// its own, and is answered.
func TestLaneLargeRequest(t *testing.T) {
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, stubHandler{}) })
	ctx := boundedCtx(t)
	code := make([]byte, laneMaxRequest+1)
	for i := range code {
		code[i] = 'x'
	}
	if _, err := c.Eval(ctx, EvalRequest{Code: string(code)}); err != nil {
		t.Fatal(err)
	}
}
