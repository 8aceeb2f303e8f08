package sandbox

import (
	"context"
	"errors"
	"io"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Bounds of a terminal's size, in character cells.
const (
	MaxTerminalCols = agentproto.MaxPTYCols
	MaxTerminalRows = agentproto.MaxPTYRows
)

// TerminalRequest starts a command on a terminal in the sandbox: Args (an
// argv looked up in PATH; none: the user's login shell) on a terminal of
// Cols by Rows whose TERM is Term ("": xterm-256color).
type TerminalRequest struct {
	Args       []string
	Cols, Rows int
	Term       string
	User       string   // "": the sandbox's default user
	Cwd        string   // "": WorkDir
	Env        []string // KEY=VALUE, added to the default environment
}

// TerminalExit is how a terminal's command ended: its exit code, or -1
// and the name of the signal that killed it ("SIGKILL").
type TerminalExit struct {
	ExitCode int
	Signal   string
}

// CheckTerminalSize refuses a terminal size outside 1..MaxTerminalCols by
// 1..MaxTerminalRows.
func CheckTerminalSize(cols, rows int) error {
	return mapErr(agentproto.CheckPTYSize(cols, rows))
}

// CheckSignal refuses a signal name that names no signal.
func CheckSignal(name string) error {
	_, err := agentproto.ParseSignal(name)
	return mapErr(err)
}

// Terminal is a command running on a terminal in a sandbox. Read returns
// its output; Write types on it. Read is not safe for concurrent use, the
// other methods are.
type Terminal struct {
	sb *Sandbox
	p  *agentproto.PTYStream
}

// OpenTerminal starts a command on a terminal. The terminal lives until
// Close or ctx ends, which hang it up: what runs on it is sent SIGHUP and
// killed soon after.
func (sb *Sandbox) OpenTerminal(ctx context.Context, req TerminalRequest) (*Terminal, error) {
	req.User, req.Cwd, req.Env = sb.b.runDefaults(req.User, req.Cwd, req.Env)
	if err := CheckTerminalSize(req.Cols, req.Rows); err != nil {
		return nil, err
	}
	preq := agentproto.PTYRequest{Args: req.Args, Cols: uint16(req.Cols), Rows: uint16(req.Rows), Term: req.Term,
		User: req.User, Cwd: req.Cwd, Env: req.Env}
	if err := preq.Validate(); err != nil {
		return nil, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return nil, err
	}
	sb.s.cfg.Meter.Exec(sb.b.rec.ID)
	p, err := a.OpenPTY(ctx, preq)
	if err != nil {
		return nil, sb.fail(err)
	}
	return &Terminal{sb: sb, p: p}, nil
}

// Read reads the terminal's output; io.EOF once the command has ended,
// when Exit says how.
func (t *Terminal) Read(b []byte) (int, error) {
	n, err := t.p.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		err = t.sb.fail(err)
	}
	return n, err
}

// Write types b on the terminal.
func (t *Terminal) Write(b []byte) (int, error) {
	n, err := t.p.Write(b)
	return n, t.sb.fail(err)
}

// Resize sets the terminal's size; its programs see SIGWINCH.
func (t *Terminal) Resize(cols, rows int) error {
	if err := CheckTerminalSize(cols, rows); err != nil {
		return err
	}
	return t.sb.fail(t.p.Control(agentproto.PTYControl{Type: agentproto.PTYResize, Cols: uint16(cols), Rows: uint16(rows)}))
}

// Signal sends a signal, named as "INT" or "SIGINT", to the terminal's
// foreground process group.
func (t *Terminal) Signal(name string) error {
	if err := CheckSignal(name); err != nil {
		return err
	}
	return t.sb.fail(t.p.Control(agentproto.PTYControl{Type: agentproto.PTYSignal, Signal: name}))
}

// Exit is how the command ended, once Read has returned io.EOF.
func (t *Terminal) Exit() (TerminalExit, bool) {
	e, ok := t.p.Exit()
	return TerminalExit{ExitCode: e.ExitCode, Signal: e.Signal}, ok
}

// Close hangs the terminal up.
func (t *Terminal) Close() error { return t.p.Close() }
