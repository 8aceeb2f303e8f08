package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TerminalOptions describe a terminal to open. The zero value is the
// sandbox user's login shell on an 80 by 24 xterm-256color terminal.
type TerminalOptions struct {
	Cols, Rows int      // 0: 80 by 24
	Term       string   // TERM; "": xterm-256color
	User       string   // "": the sandbox's default user
	Cwd        string   // "": /work
	Cmd        []string // the argv; none: the user's login shell
	Env        map[string]string
	// OnError, if set, is given the message of each control message the
	// daemon refused (the terminal lives on). It is called from Read.
	OnError func(msg string)
}

// TerminalSession is a command running on a terminal in a sandbox. Read
// returns its output and io.EOF once the command has ended; Write types
// on it. Read and Wait are for one goroutine; Write, Resize, Signal and
// Close may be called from any.
type TerminalSession struct {
	c       *websocket.Conn
	onError func(string)

	pending []byte
	exit    *apitype.ExitStatus
	readErr error

	closeOnce sync.Once
}

// Terminal opens a terminal in sandbox id (a WebSocket to GET
// /v1/sandboxes/{id}/pty). Only the dial is bounded, by ctx and the
// Client's timeout; the session lasts until the command ends or Close.
func (c *Client) Terminal(ctx context.Context, id, sandboxToken string, opts TerminalOptions) (*TerminalSession, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/pty"), terminalQuery(opts), sandboxToken)
	if err != nil {
		return nil, err
	}
	req.Header.Del("Accept")
	conn, resp, err := websocket.Dial(ctx, req.URL.String(), &websocket.DialOptions{
		HTTPClient: c.http1(), HTTPHeader: req.Header, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, errorFrom(resp)
		}
		return nil, fmt.Errorf("cove: open a terminal in %s: %w", id, err)
	}
	conn.SetReadLimit(1 << 20)
	return &TerminalSession{c: conn, onError: opts.OnError}, nil
}

func terminalQuery(o TerminalOptions) url.Values {
	q := url.Values{}
	if o.Cols > 0 {
		q.Set("cols", strconv.Itoa(o.Cols))
	}
	if o.Rows > 0 {
		q.Set("rows", strconv.Itoa(o.Rows))
	}
	for k, v := range map[string]string{"term": o.Term, "user": o.User, "cwd": o.Cwd} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q["cmd"] = o.Cmd
	keys := make([]string, 0, len(o.Env))
	for k := range o.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("env", k+"="+o.Env[k])
	}
	if len(q["cmd"]) == 0 {
		delete(q, "cmd")
	}
	return q
}

// http1 is the Client's HTTP client held to HTTP/1.1, which a WebSocket
// upgrade needs.
func (c *Client) http1() *http.Client {
	t, ok := c.hc.Transport.(*http.Transport)
	if !ok {
		return c.hc
	}
	t = t.Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	hc := *c.hc
	hc.Transport = t
	return &hc
}

// Read reads the terminal's output. It returns io.EOF once the command
// has ended, when Wait says how.
func (s *TerminalSession) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.readErr != nil {
			return 0, s.readErr
		}
		s.readErr = s.next()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// next reads one message: output into pending, or the exit, or the end.
func (s *TerminalSession) next() error {
	typ, msg, err := s.c.Read(context.Background())
	if err != nil {
		if s.exit != nil {
			return io.EOF // the exit is in; how the connection ended matters not
		}
		return fmt.Errorf("cove: the terminal ended before its command did: %w", err)
	}
	if typ == websocket.MessageBinary {
		s.pending = msg
		return nil
	}
	var ev apitype.TerminalEvent
	if err := json.Unmarshal(msg, &ev); err != nil {
		return fmt.Errorf("cove: a terminal message that is not JSON: %w", err)
	}
	switch ev.Type {
	case apitype.TerminalExit:
		st := apitype.ExitStatus{ExitCode: -1, Signal: ev.Signal}
		if ev.ExitCode != nil {
			st.ExitCode = *ev.ExitCode
		}
		s.exit = &st
	case apitype.TerminalError:
		if s.onError != nil {
			s.onError(ev.Error)
		}
	}
	return nil
}

// Wait returns how the command ended. It reads, and drops, what output
// Read has not returned yet.
func (s *TerminalSession) Wait() (apitype.ExitStatus, error) {
	if _, err := io.Copy(io.Discard, s); err != nil {
		return apitype.ExitStatus{}, err
	}
	if s.exit == nil {
		return apitype.ExitStatus{}, errors.New("cove: the terminal ended without an exit status")
	}
	return *s.exit, nil
}

// Write types p on the terminal.
func (s *TerminalSession) Write(p []byte) (int, error) {
	if err := s.c.Write(context.Background(), websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize tells the terminal its new size.
func (s *TerminalSession) Resize(cols, rows int) error {
	return s.control(apitype.TerminalControl{Type: apitype.TerminalResize, Cols: cols, Rows: rows})
}

// Signal sends a signal ("INT", "TERM", ...) to the terminal's foreground
// process group.
func (s *TerminalSession) Signal(name string) error {
	return s.control(apitype.TerminalControl{Type: apitype.TerminalSignal, Signal: name})
}

func (s *TerminalSession) control(m apitype.TerminalControl) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return s.c.Write(context.Background(), websocket.MessageText, b)
}

// Close hangs the terminal up: what still runs on it ends.
func (s *TerminalSession) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.c.Close(websocket.StatusNormalClosure, "") })
	return err
}
