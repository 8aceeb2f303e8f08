package agentproto

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/hashicorp/yamux"
)

// Client is the host's end of an agent connection. It is safe for
// concurrent use: every call opens its own stream.
type Client struct {
	sess *yamux.Session
}

// NewClient runs the host side of the protocol over conn. The Client owns
// conn and closes it on Close.
func NewClient(conn net.Conn) (*Client, error) {
	sess, err := yamux.Client(conn, muxConfig())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agentproto: start session: %w", err)
	}
	return &Client{sess: sess}, nil
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.sess.Close() }

// Closed returns a channel closed when the connection is gone.
func (c *Client) Closed() <-chan struct{} { return c.sess.CloseChan() }

// open starts a call: it opens a stream, sends the header and arranges for
// the stream to close when ctx is done, which the agent takes as a cancel.
func (c *Client) open(ctx context.Context, op string, body any) (*yamux.Stream, func() bool, error) {
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, nil, fmt.Errorf("agentproto: open stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	raw, err := json.Marshal(body)
	if err != nil {
		stop()
		st.Close()
		return nil, nil, err
	}
	if err := WriteJSON(st, Header{Op: op, Body: raw}); err != nil {
		stop()
		st.Close()
		return nil, nil, c.ctxErr(ctx, fmt.Errorf("agentproto: send %s: %w", op, err))
	}
	return st, stop, nil
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
	if resp.Error != nil {
		return resp.Error
	}
	if out == nil || len(resp.Body) == 0 {
		return nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("agentproto: decode %s response: %w", op, err)
	}
	return nil
}

// call is a request with a JSON answer and no content.
func (c *Client) call(ctx context.Context, op string, in, out any) error {
	st, stop, err := c.open(ctx, op, in)
	if err != nil {
		return err
	}
	defer stop()
	defer st.Close()
	return c.readResponse(ctx, st, op, out)
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var r PingResult
	err := c.call(ctx, OpPing, struct{}{}, &r)
	return r, err
}

// Exec runs a command and waits for it.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var r ExecResult
	err := c.call(ctx, OpExec, req, &r)
	return r, err
}

// Eval evaluates Python code in the warm interpreter.
func (c *Client) Eval(ctx context.Context, req EvalRequest) (EvalResult, error) {
	var r EvalResult
	err := c.call(ctx, OpEval, req, &r)
	return r, err
}

// List lists a directory tree.
func (c *Client) List(ctx context.Context, req ListRequest) (ListResult, error) {
	var r ListResult
	err := c.call(ctx, OpList, req, &r)
	return r, err
}

// Wait blocks until a file contains a text or the request's timeout elapses.
func (c *Client) Wait(ctx context.Context, req WaitRequest) (WaitResult, error) {
	var r WaitResult
	err := c.call(ctx, OpWait, req, &r)
	return r, err
}

// Warm starts the eval interpreter.
func (c *Client) Warm(ctx context.Context) error {
	return c.call(ctx, OpWarm, struct{}{}, nil)
}

// Restored gives a restored sandbox's agent its new identity.
func (c *Client) Restored(ctx context.Context, req RestoredRequest) error {
	return c.call(ctx, OpRestored, req, nil)
}

// Put writes the content read from r to a file, atomically.
func (c *Client) Put(ctx context.Context, req PutRequest, r io.Reader) (FileInfo, error) {
	var info FileInfo
	st, stop, err := c.open(ctx, OpPut, req)
	if err != nil {
		return info, err
	}
	defer stop()
	defer st.Close()
	// The agent may refuse before reading any content (a bad path, say); it
	// then answers at once and resets the stream, so watch for an early
	// answer while sending.
	sent := make(chan error, 1)
	go func() {
		dw := NewDataWriter(st)
		_, err := io.Copy(dw, r)
		if err == nil {
			err = dw.Close()
		} else {
			// Closing without the End frame tells the agent the content is
			// cut short, so it answers instead of waiting for the rest.
			st.Close()
		}
		sent <- err
	}()
	respErr := c.readResponse(ctx, st, OpPut, &info)
	if respErr != nil {
		st.Close()
		<-sent
		return info, respErr
	}
	if err := <-sent; err != nil {
		return info, c.ctxErr(ctx, fmt.Errorf("agentproto: send content: %w", err))
	}
	return info, nil
}

// Get opens a file for reading. The caller must close the returned reader.
func (c *Client) Get(ctx context.Context, req GetRequest) (FileInfo, io.ReadCloser, error) {
	var info FileInfo
	st, stop, err := c.open(ctx, OpGet, req)
	if err != nil {
		return info, nil, err
	}
	if err := c.readResponse(ctx, st, OpGet, &info); err != nil {
		stop()
		st.Close()
		return info, nil, err
	}
	return info, &contentReader{Reader: NewDataReader(st), st: st, stop: stop, ctx: ctx, c: c}, nil
}

type contentReader struct {
	io.Reader
	st   *yamux.Stream
	stop func() bool
	ctx  context.Context
	c    *Client
}

func (r *contentReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF {
		err = r.c.ctxErr(r.ctx, err)
	}
	return n, err
}

func (r *contentReader) Close() error {
	r.stop()
	return r.st.Close()
}
