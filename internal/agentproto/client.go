package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/hashicorp/yamux"
)

// Client is the host's end of an agent connection. It is safe for
// concurrent use: every call opens its own stream.
type Client struct {
	sess *yamux.Session

	laneMu sync.Mutex
	lane   *lane // small calls' stream, opened at the first
	noLane bool  // the agent has none
}

// NewClient runs the host side of the protocol over conn. The Client owns
// conn and closes it on Close.
func NewClient(conn net.Conn) (*Client, error) {
	bc := newBatchConn(conn)
	sess, err := yamux.Client(bc, muxConfig())
	if err != nil {
		bc.Close()
		return nil, fmt.Errorf("agentproto: start session: %w", err)
	}
	return &Client{sess: sess}, nil
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.sess.Close() }

// Closed returns a channel closed when the connection is gone.
func (c *Client) Closed() <-chan struct{} { return c.sess.CloseChan() }

// call is one call in flight: its stream, and the send of its request,
// which runs on its own so that an agent that answers or hangs up before
// reading all of it (a refusal) cannot block the caller on a full window.
type call struct {
	st     *yamux.Stream
	stop   func() bool
	sent   chan error // the send's outcome
	waited bool
	err    error
}

// request is a Header with its body not yet encoded, so that a large one
// is encoded once.
type request struct {
	Op   string `json:"op"`
	Body any    `json:"body,omitempty"`
}

// open starts a call: it opens a stream, arranges for the stream to close
// when ctx is done, which the agent takes as a cancel, and sends the
// header, then what content writes, from a goroutine. The caller reads
// the answer meanwhile and closes the call. A header over the frame limit
// fails at once with ErrFrameTooLarge: the agent would never read it.
func (c *Client) open(ctx context.Context, op string, body any, content func(*yamux.Stream) error) (*call, error) {
	hdr, err := encodeJSON(request{Op: op, Body: body})
	if err != nil {
		return nil, fmt.Errorf("agentproto: encode %s: %w", op, err)
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("agentproto: open stream: %w", err)
	}
	cl := &call{st: st, stop: context.AfterFunc(ctx, func() { st.Close() }), sent: make(chan error, 1)}
	go func() {
		err := writeFrame(st, frameJSON, hdr)
		if err == nil && content != nil {
			err = content(st)
		}
		cl.sent <- err
	}()
	return cl, nil
}

// wait returns the send's outcome once it is over.
func (cl *call) wait() error {
	if !cl.waited {
		cl.err, cl.waited = <-cl.sent, true
	}
	return cl.err
}

// close ends the call, cutting short a send still under way.
func (cl *call) close() error {
	cl.stop()
	err := cl.st.Close()
	cl.wait()
	return err
}

// answer reads the agent's Response frame into out. An agent that hung up
// instead of answering may have refused a request it did not read whole.
func (c *Client) answer(ctx context.Context, cl *call, op string, out any) error {
	err := c.readResponse(ctx, cl.st, op, out)
	var ae *Error
	if err == nil || errors.As(err, &ae) || ctx.Err() != nil {
		return err
	}
	cl.st.Close()
	if serr := cl.wait(); serr != nil {
		return fmt.Errorf("agentproto: the agent hung up on %s before reading all of it: %w", op, err)
	}
	return err
}

// ctxErr prefers the context's error: a stream closed by a cancel reports
// something less useful.
func (c *Client) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// readResponse reads the agent's Response frame into out.
func (c *Client) readResponse(ctx context.Context, st io.Reader, op string, out any) error {
	var resp Response
	if err := ReadJSON(st, &resp); err != nil {
		return c.ctxErr(ctx, fmt.Errorf("agentproto: read %s response: %w", op, err))
	}
	return decodeAnswer(op, resp.Error, resp.Body, out)
}

// do is a request with a JSON answer and no content.
func (c *Client) do(ctx context.Context, op string, in, out any) error {
	if handled, err := c.laneCall(ctx, op, in, out); handled {
		return err
	}
	cl, err := c.open(ctx, op, in, nil)
	if err != nil {
		return err
	}
	defer cl.close()
	if err := c.answer(ctx, cl, op, out); err != nil {
		return err
	}
	if err := cl.wait(); err != nil {
		return c.ctxErr(ctx, fmt.Errorf("agentproto: send %s: %w", op, err))
	}
	return nil
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var r PingResult
	err := c.do(ctx, OpPing, struct{}{}, &r)
	return r, err
}

// Exec runs a command and waits for it.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var r ExecResult
	err := c.do(ctx, OpExec, req, &r)
	return r, err
}

// Eval evaluates Python code in the warm interpreter.
func (c *Client) Eval(ctx context.Context, req EvalRequest) (EvalResult, error) {
	var r EvalResult
	err := c.do(ctx, OpEval, req, &r)
	return r, err
}

// List lists a directory tree.
func (c *Client) List(ctx context.Context, req ListRequest) (ListResult, error) {
	var r ListResult
	err := c.do(ctx, OpList, req, &r)
	return r, err
}

// Wait blocks until a file contains a text or the request's timeout elapses.
func (c *Client) Wait(ctx context.Context, req WaitRequest) (WaitResult, error) {
	var r WaitResult
	err := c.do(ctx, OpWait, req, &r)
	return r, err
}

// Warm starts the eval interpreter.
func (c *Client) Warm(ctx context.Context) error {
	return c.do(ctx, OpWarm, struct{}{}, nil)
}

// Restored gives a restored sandbox's agent its new identity.
func (c *Client) Restored(ctx context.Context, req RestoredRequest) error {
	return c.do(ctx, OpRestored, req, nil)
}

// Put writes the content read from r to a file, atomically.
func (c *Client) Put(ctx context.Context, req PutRequest, r io.Reader) (FileInfo, error) {
	var info FileInfo
	err := c.sendContent(ctx, OpPut, req, r, &info)
	return info, err
}

// sendContent is a call whose content, read from r, follows its header
// as Data frames, with a JSON answer into out.
func (c *Client) sendContent(ctx context.Context, op string, req any, r io.Reader, out any) error {
	// The agent may refuse before reading any content (a bad path, say); it
	// then answers at once, which ends the send.
	cl, err := c.open(ctx, op, req, func(st *yamux.Stream) error {
		dw := &dataWriter{w: st}
		if _, err := dw.readFull(r); err != nil {
			// Closing without the End frame tells the agent the content is
			// cut short, so it answers instead of waiting for the rest.
			st.Close()
			return err
		}
		return dw.Close()
	})
	if err != nil {
		return err
	}
	defer cl.close()
	if err := c.answer(ctx, cl, op, out); err != nil {
		return err
	}
	if err := cl.wait(); err != nil {
		return c.ctxErr(ctx, fmt.Errorf("agentproto: send content: %w", err))
	}
	return nil
}

// Get opens a file for reading. The caller must close the returned reader.
func (c *Client) Get(ctx context.Context, req GetRequest) (FileInfo, io.ReadCloser, error) {
	var info FileInfo
	cl, err := c.open(ctx, OpGet, req, nil)
	if err != nil {
		return info, nil, err
	}
	if err := c.answer(ctx, cl, OpGet, &info); err != nil {
		cl.close()
		return info, nil, err
	}
	return info, &contentReader{Reader: NewDataReader(cl.st), cl: cl, ctx: ctx, c: c}, nil
}

type contentReader struct {
	io.Reader
	cl  *call
	ctx context.Context
	c   *Client
}

func (r *contentReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF {
		err = r.c.ctxErr(r.ctx, err)
	}
	return n, err
}

func (r *contentReader) Close() error { return r.cl.close() }
