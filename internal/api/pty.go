package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// maxTerminalMessage bounds one WebSocket message from a terminal's
// client: a large paste, not a file transfer.
const maxTerminalMessage = 1 << 20

// ptyRoutes registers the interactive terminal.
func (s *Server) ptyRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /v1/sandboxes/{id}/pty", s.data(s.pty))
}

// pty runs a command on a terminal in the sandbox over a WebSocket (see
// apitype.TerminalControl). Everything that can be refused is refused
// before the upgrade, with a plain status.
func (s *Server) pty(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	req, err := terminalRequest(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") {
		s.fail(w, r, fmt.Errorf("%w: a terminal is a WebSocket: connect with a WebSocket client (Connection: Upgrade, Upgrade: websocket)", sandbox.ErrInvalid))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	term, err := sb.OpenTerminal(ctx, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer term.Close()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered
	}
	defer c.CloseNow()
	c.SetReadLimit(maxTerminalMessage)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel() // the client is gone: hang up
		terminalInput(ctx, c, term)
	}()
	err = terminalOutput(ctx, c, term)
	switch {
	case err == nil:
		c.Close(websocket.StatusNormalClosure, "")
	case ctx.Err() == nil:
		s.log.Debug("terminal ended", "sandbox", sb.ID(), "err", err)
		c.Close(websocket.StatusInternalError, truncate(err.Error(), 120))
	}
	cancel()
	c.CloseNow()
	wg.Wait()
}

// terminalRequest reads a terminal's query: cols and rows (default 80 by
// 24), term, user, cwd, cmd (repeated: the argv; none: the login shell)
// and env (repeated K=V).
func terminalRequest(r *http.Request) (sandbox.TerminalRequest, error) {
	q := r.URL.Query()
	req := sandbox.TerminalRequest{Args: q["cmd"], Term: q.Get("term"), User: q.Get("user"), Cwd: q.Get("cwd"), Env: q["env"],
		Cols: apitype.DefaultTerminalCols, Rows: apitype.DefaultTerminalRows}
	for _, f := range []struct {
		name string
		v    *int
	}{{"cols", &req.Cols}, {"rows", &req.Rows}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return req, fmt.Errorf("%w: %s=%.20q is not a number", sandbox.ErrInvalid, f.name, s)
		}
		*f.v = n
	}
	return req, sandbox.CheckTerminalSize(req.Cols, req.Rows)
}

// terminalOutput copies the terminal's output to the client as binary
// messages, then its exit as a text message.
func terminalOutput(ctx context.Context, c *websocket.Conn, term *sandbox.Terminal) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := term.Read(buf)
		if n > 0 {
			if werr := c.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	ex, _ := term.Exit()
	return writeEvent(ctx, c, apitype.TerminalEvent{Type: apitype.TerminalExit, ExitCode: &ex.ExitCode, Signal: ex.Signal})
}

// terminalInput carries the client's messages to the terminal until the
// client closes or breaks the connection: bytes to type, and control
// messages, a refused one answered with an error message.
func terminalInput(ctx context.Context, c *websocket.Conn, term *sandbox.Terminal) {
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := term.Write(msg); err != nil {
				return
			}
			continue
		}
		if err := terminalControl(term, msg); err != nil {
			if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrDead) {
				return
			}
			_, code := errStatus(err)
			if writeEvent(ctx, c, apitype.TerminalEvent{Type: apitype.TerminalError, Error: err.Error(), Code: code}) != nil {
				return
			}
		}
	}
}

func terminalControl(term *sandbox.Terminal, msg []byte) error {
	var m apitype.TerminalControl
	if err := json.Unmarshal(msg, &m); err != nil {
		return fmt.Errorf("%w: a text message is a JSON control message, such as {\"type\":\"resize\",\"cols\":80,\"rows\":24}: %v", sandbox.ErrInvalid, err)
	}
	switch m.Type {
	case apitype.TerminalResize:
		return term.Resize(m.Cols, m.Rows)
	case apitype.TerminalSignal:
		return term.Signal(m.Signal)
	}
	return fmt.Errorf("%w: control message type %.32q: want %q or %q (keystrokes go in binary messages)", sandbox.ErrInvalid, m.Type,
		apitype.TerminalResize, apitype.TerminalSignal)
}

func writeEvent(ctx context.Context, c *websocket.Conn, ev apitype.TerminalEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}

// truncate shortens s to at most n bytes: a close reason must fit in a
// control frame.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
