package agentproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/yamux"
)

// OpCalls opens the lane: one long-lived stream that carries small calls
// (laneOps) as JSON frames tagged with an id, answered in any order. A call
// on a stream of its own costs an open, an accept and a close besides its
// request and answer; under gVisor every one of them is a segment through
// the sandbox's network stack, and the accept a goroutine woken in the
// agent. The agent acknowledges the lane with an empty Response first; an
// agent that predates it refuses the op, and the client goes back to a
// stream per call.
const OpCalls = "calls"

// laneOps are the ops a lane carries: small requests and, as a rule, small
// answers, which must not wait behind a large one (an exec's output, a
// listing) on the one stream.
var laneOps = map[string]bool{OpPing: true, OpEval: true, OpWait: true, OpWarm: true}

// laneMaxRequest bounds a request sent on the lane; a larger one takes a
// stream of its own so that it delays no other call.
const laneMaxRequest = 64 << 10

// errLaneRefused reports an agent without the lane: the calls sent on it,
// which it never read, go on streams of their own.
var errLaneRefused = errors.New("agentproto: the agent has no call lane")

// laneRequest is a call on the lane, or the cancel of one.
type laneRequest struct {
	ID     uint64 `json:"id"`
	Op     string `json:"op,omitempty"`
	Body   any    `json:"body,omitempty"`
	Cancel bool   `json:"cancel,omitempty"`
}

// laneAnswer is the answer to the lane's call ID.
type laneAnswer struct {
	ID    uint64          `json:"id"`
	Error *Error          `json:"error,omitempty"`
	Body  json.RawMessage `json:"body,omitempty"`
}

// lane is the host's end of a lane.
type lane struct {
	st *yamux.Stream

	wmu sync.Mutex // one frame at a time

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan laneAnswer
	err     error // why the lane ended or broke: no call is added once it is set
}

// openLane opens a lane; the agent's acknowledgement is read with the
// first answer, so a lane costs no round trip of its own.
func openLane(sess *yamux.Session) (*lane, error) {
	st, err := sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("agentproto: open stream: %w", err)
	}
	hdr, err := encodeJSON(request{Op: OpCalls})
	if err == nil {
		err = writeFrame(st, frameJSON, hdr)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("agentproto: open the call lane: %w", err)
	}
	l := &lane{st: st, pending: map[uint64]chan laneAnswer{}}
	go l.read()
	return l, nil
}

// read delivers answers until the stream ends, then fails the calls
// still waiting.
func (l *lane) read() {
	var ack Response
	err := ReadJSON(l.st, &ack)
	if err == nil && ack.Error != nil {
		err = errLaneRefused
	}
	for err == nil {
		var a laneAnswer
		if err = ReadJSON(l.st, &a); err != nil {
			break
		}
		l.mu.Lock()
		ch := l.pending[a.ID]
		delete(l.pending, a.ID)
		l.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	l.st.Close()
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
}

// failed returns why the lane ended, or nil while it works.
func (l *lane) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// errNotForLane reports a call the lane does not take: its agent has no
// lane, or its request is too large. It goes on a stream of its own.
var errNotForLane = errors.New("agentproto: not a call for the lane")

// call sends a request and waits for its answer into out.
func (l *lane) call(ctx context.Context, op string, in, out any) error {
	l.mu.Lock()
	if l.err != nil {
		// Not sent: a stream of its own can still carry it.
		l.mu.Unlock()
		return errNotForLane
	}
	l.next++
	id := l.next
	l.mu.Unlock()
	req, err := encodeJSON(laneRequest{ID: id, Op: op, Body: in})
	if err != nil || len(req) > laneMaxRequest {
		return errNotForLane
	}
	ch := make(chan laneAnswer, 1)
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return errNotForLane
	}
	l.pending[id] = ch
	l.mu.Unlock()

	if err := l.write(req); err != nil {
		// The lane broke: the agent runs no call it did not read whole, so
		// a stream of its own can still carry it.
		l.forget(id)
		l.mu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("agentproto: write to the call lane: %w", err)
		}
		l.mu.Unlock()
		l.st.Close()
		return errNotForLane
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return l.ended(ctx, op)
		}
		return decodeAnswer(op, a.Error, a.Body, out)
	case <-ctx.Done():
		// The agent cancels the call; its answer, if it comes, is dropped.
		if l.forget(id) {
			go func() {
				if b, err := encodeJSON(laneRequest{ID: id, Cancel: true}); err == nil {
					l.write(b)
				}
			}()
		}
		return ctx.Err()
	}
}

// ended is the error of a call whose lane ended before its answer.
func (l *lane) ended(ctx context.Context, op string) error {
	err := l.failed()
	if errors.Is(err, errLaneRefused) {
		return errNotForLane
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("agentproto: read %s response: %w", op, err)
}

// forget drops a pending call, reporting whether it was still pending.
func (l *lane) forget(id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.pending[id]
	delete(l.pending, id)
	return ok
}

func (l *lane) write(frame []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return writeFrame(l.st, frameJSON, frame)
}

// decodeAnswer decodes an answer's body into out, or returns its error.
func decodeAnswer(op string, e *Error, body json.RawMessage, out any) error {
	if e != nil {
		return e
	}
	if out == nil || len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("agentproto: decode %s response: %w", op, err)
	}
	return nil
}

// callLane returns the lane, opened if it is not yet or broke, or nil for
// an agent without one.
func (c *Client) callLane() *lane {
	c.laneMu.Lock()
	defer c.laneMu.Unlock()
	if c.noLane {
		return nil
	}
	if c.lane != nil {
		err := c.lane.failed()
		if err == nil {
			return c.lane
		}
		if errors.Is(err, errLaneRefused) {
			c.noLane = true
			return nil
		}
	}
	l, err := openLane(c.sess)
	if err != nil {
		return nil // the call's own stream reports the session's error
	}
	c.lane = l
	return l
}

// laneCall makes a call on the lane if the lane takes it; handled is false
// when it goes on a stream of its own.
func (c *Client) laneCall(ctx context.Context, op string, in, out any) (handled bool, err error) {
	if !laneOps[op] {
		return false, nil
	}
	l := c.callLane()
	if l == nil {
		return false, nil
	}
	err = l.call(ctx, op, in, out)
	if errors.Is(err, errNotForLane) {
		return false, nil
	}
	return true, err
}

// serveLane is the agent's end of the lane: each call runs in a goroutine
// of its own, with a context that a cancel from the host, or the lane's
// end, cancels.
func serveLane(h Handler) StreamServer {
	return func(ctx context.Context, st *yamux.Stream, op string, _ func(any) error) bool {
		if op != OpCalls {
			return false
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wmu sync.Mutex
		write := func(b []byte) {
			wmu.Lock()
			defer wmu.Unlock()
			writeFrame(st, frameJSON, b)
		}
		if err := WriteJSON(st, Response{}); err != nil {
			return true
		}
		var mu sync.Mutex
		calls := map[uint64]context.CancelFunc{}
		for {
			var req struct {
				ID     uint64          `json:"id"`
				Op     string          `json:"op"`
				Body   json.RawMessage `json:"body"`
				Cancel bool            `json:"cancel"`
			}
			if err := ReadJSON(st, &req); err != nil {
				return true
			}
			mu.Lock()
			stop, dup := calls[req.ID]
			mu.Unlock()
			if req.Cancel || dup {
				if stop != nil {
					stop()
				}
				continue
			}
			cctx, ccancel := context.WithCancel(ctx)
			mu.Lock()
			calls[req.ID] = ccancel
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(calls, req.ID)
					mu.Unlock()
					ccancel()
				}()
				var out any
				var err error = Errorf(CodeInvalid, "op %q is not carried on the call lane", req.Op)
				if laneOps[req.Op] {
					out, _, err = serveCall(cctx, h, req.Op, bodyDecoder(req.Op, req.Body))
				}
				write(answerFrame(&req.ID, out, err))
			})
		}
	}
}
