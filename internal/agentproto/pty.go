package agentproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// OpPTY starts a command on a terminal. The call is bidirectional: after
// its Response the agent sends the terminal's output as Stdout Chunk
// records and, when the command has ended, a PTYExit JSON record and the
// End frame; the host sends keystrokes as Data frames and PTYControl JSON
// frames. The host closing the stream hangs the terminal up.
const OpPTY = "pty"

// Bounds of a terminal's size, in character cells.
const (
	MaxPTYCols = 1000
	MaxPTYRows = 1000
)

// DefaultTerm is a terminal's TERM unless the request names another.
const DefaultTerm = "xterm-256color"

// PTYRequest starts a terminal: Args on it (none: the user's login
// shell), as User, in Cwd, with Env added to the default environment and
// TERM set to Term.
type PTYRequest struct {
	Args []string `json:"args,omitempty"`
	Cols uint16   `json:"cols"`
	Rows uint16   `json:"rows"`
	Term string   `json:"term,omitempty"` // "": DefaultTerm
	User string   `json:"user,omitempty"` // "": root
	Cwd  string   `json:"cwd,omitempty"`  // "": WorkDir
	Env  []string `json:"env,omitempty"`  // KEY=VALUE
}

// Validate reports whether r is well formed: a size within the bounds,
// and arguments, env, cwd and user as an exec takes them.
func (r *PTYRequest) Validate() error {
	if err := CheckPTYSize(int(r.Cols), int(r.Rows)); err != nil {
		return err
	}
	if err := checkString("term", r.Term, 256); err != nil {
		return err
	}
	if strings.ContainsAny(r.Term, "=/ \t\n") {
		return Errorf(CodeInvalid, "term %.40q is not a terminal type name", r.Term)
	}
	args := r.Args
	if len(args) == 0 {
		args = []string{"sh"} // the default shell: only the rest to check
	}
	e := ExecRequest{Args: args, Cwd: r.Cwd, Env: r.Env, User: r.User}
	return e.Validate()
}

// CheckPTYSize refuses a terminal size outside 1..MaxPTYCols by
// 1..MaxPTYRows.
func CheckPTYSize(cols, rows int) error {
	if cols < 1 || cols > MaxPTYCols || rows < 1 || rows > MaxPTYRows {
		return Errorf(CodeInvalid, "terminal size %dx%d: columns must be 1 to %d and rows 1 to %d", cols, rows, MaxPTYCols, MaxPTYRows)
	}
	return nil
}

// Kinds of PTYControl.
const (
	PTYResize = "resize"
	PTYSignal = "signal"
)

// PTYControl is a control message from the host: a resize to Cols by Rows,
// or a signal (a name such as "INT" or "SIGINT") to the terminal's
// foreground process group.
type PTYControl struct {
	Type   string `json:"type"`
	Cols   uint16 `json:"cols,omitempty"`
	Rows   uint16 `json:"rows,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// ParseSignal returns the signal a name such as "INT", "sigint" or
// "SIGINT" stands for.
func ParseSignal(name string) (unix.Signal, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	if sig := unix.SignalNum(n); sig != 0 {
		return sig, nil
	}
	return 0, Errorf(CodeInvalid, "no signal named %.32q: use a name such as INT, TERM, HUP or KILL", name)
}

// SignalName is the name of sig as the API reports it ("SIGINT").
func SignalName(sig unix.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

// PTYExit is how a terminal's command ended: its exit code, or -1 and the
// signal that killed it.
type PTYExit struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
}

// PTY is a terminal the agent runs a command on. Read returns its output
// and io.EOF once the command has ended and its output is drained; Write
// types on it.
type PTY interface {
	io.ReadWriter
	Resize(cols, rows uint16) error
	Signal(sig unix.Signal) error
	// Exit is how the command ended; it is valid once Read has returned
	// io.EOF.
	Exit() PTYExit
	// Close hangs the terminal up: what still runs on it is told (SIGHUP)
	// and killed after a grace period. Close waits for that and frees
	// everything the terminal held.
	Close() error
}

// PTYHandler starts terminals on the guest side.
type PTYHandler interface {
	StartPTY(ctx context.Context, req PTYRequest) (PTY, error)
}

// ptyServer serves OpPTY with h.
func ptyServer(h PTYHandler) StreamServer {
	return func(ctx context.Context, st *yamux.Stream, op string, decode func(any) error) bool {
		if op != OpPTY {
			return false
		}
		var req PTYRequest
		if err := decode(&req); err != nil {
			writeResponse(st, nil, err)
			return true
		}
		t, err := h.StartPTY(ctx, req)
		if err != nil {
			writeResponse(st, nil, err)
			return true
		}
		if err := writeResponse(st, struct{}{}, nil); err != nil {
			t.Close()
			return true
		}
		servePTY(st, t)
		return true
	}
}

// servePTY carries a terminal's output to the host and the host's frames
// to it until the command ends (the exit record goes last) or the host
// hangs up.
func servePTY(st *yamux.Stream, t PTY) {
	hostGone := make(chan struct{})
	go func() {
		defer close(hostGone)
		ReadHostFrames(st, func(p []byte) error {
			_, err := t.Write(p)
			return err
		}, func(p []byte) error {
			applyControl(t, p) // a bad message is ignored: the terminal lives on
			return nil
		})
	}()
	var once sync.Once
	hangUp := func() { once.Do(func() { t.Close() }) }
	defer hangUp() // after the exit record too: it frees the terminal
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-hostGone:
			hangUp() // ends Read below
		case <-stop:
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := t.Read(buf)
		if n > 0 {
			if werr := WriteChunk(st, Stdout, buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return
		}
	}
	if WriteJSON(st, t.Exit()) == nil {
		WriteEnd(st)
	}
}

func applyControl(t PTY, p []byte) error {
	var c PTYControl
	if err := json.Unmarshal(p, &c); err != nil {
		return err
	}
	switch c.Type {
	case PTYResize:
		if err := CheckPTYSize(int(c.Cols), int(c.Rows)); err != nil {
			return err
		}
		return t.Resize(c.Cols, c.Rows)
	case PTYSignal:
		sig, err := ParseSignal(c.Signal)
		if err != nil {
			return err
		}
		return t.Signal(sig)
	}
	return Errorf(CodeInvalid, "unknown control message %.32q", c.Type)
}

// PTYStream is the host's end of a terminal.
type PTYStream struct {
	s  *Stream
	mu sync.Mutex // serialises the host's frames
	dw io.Writer

	pending []byte // the rest of the last output chunk
	exit    *PTYExit
}

// OpenPTY starts a terminal. The stream lives until Close or ctx ends.
func (c *Client) OpenPTY(ctx context.Context, req PTYRequest) (*PTYStream, error) {
	s, err := c.OpenStream(ctx, OpPTY, req, nil)
	if err != nil {
		return nil, err
	}
	return &PTYStream{s: s, dw: NewDataWriter(s.Writer())}, nil
}

// Read reads the terminal's output; io.EOF once the command has ended,
// when Exit says how. It is not safe for concurrent use.
func (p *PTYStream) Read(b []byte) (int, error) {
	for len(p.pending) == 0 {
		if p.exit != nil {
			return 0, io.EOF
		}
		rec, err := p.s.Next()
		if err != nil {
			return 0, err
		}
		switch rec.Kind {
		case RecordChunk:
			p.pending = rec.Data
		case RecordJSON:
			var e PTYExit
			if err := rec.Decode(&e); err != nil {
				return 0, fmt.Errorf("agentproto: decode a terminal's exit: %w", err)
			}
			p.exit = &e
		case RecordEnd:
			if p.exit == nil {
				return 0, io.ErrUnexpectedEOF
			}
		default:
			return 0, fmt.Errorf("agentproto: unexpected record kind %d on a terminal", rec.Kind)
		}
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

// Exit is how the command ended, once Read has returned io.EOF.
func (p *PTYStream) Exit() (PTYExit, bool) {
	if p.exit == nil {
		return PTYExit{}, false
	}
	return *p.exit, true
}

// Write types b on the terminal.
func (p *PTYStream) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dw.Write(b)
}

// Control sends a control message.
func (p *PTYStream) Control(c PTYControl) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return WriteJSON(p.s.Writer(), c)
}

// Close hangs the terminal up.
func (p *PTYStream) Close() error { return p.s.Close() }
