package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/proc"
)

// ptyHangupGrace is how long what runs on a hung-up terminal has to exit
// after SIGHUP before it is killed.
const ptyHangupGrace = 2 * time.Second

// ptyDrain bounds how long a terminal's output is read once its command
// has ended and its session is gone: a process that left the session may
// hold the terminal open for good.
const ptyDrain = 200 * time.Millisecond

// StartPTY starts a command on a new terminal, as the leader of a session
// whose controlling terminal it is, so that job control and ^C work.
func (a *Agent) StartPTY(_ context.Context, req agentproto.PTYRequest) (agentproto.PTY, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	term := req.Term
	if term == "" {
		term = agentproto.DefaultTerm
	}
	c, lookErr, err := a.resolveCommand(req.Args, "", req.Cwd, req.User, append([]string{"TERM=" + term}, req.Env...))
	switch {
	case err != nil:
		return nil, err
	case lookErr != nil:
		return nil, agentproto.Errorf(agentproto.CodeInvalid, "%s: %v", c.argv[0], lookErr)
	}
	cmd := a.cmd(nil, c)
	// A session leader leads its process group already: setpgid would fail.
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	t, err := startPTY(cmd, req.Cols, req.Rows)
	if err != nil {
		return nil, fmt.Errorf("start %s on a terminal: %w", c.argv[0], err)
	}
	a.log.Debug("pty started", "argv", c.argv, "pid", t.pid, "user", req.User)
	return t, nil
}

// ptyTerm is a command on a terminal: agentproto.PTY.
type ptyTerm struct {
	cmd    *exec.Cmd
	pid    int
	master *os.File // non-blocking, so Close and deadlines end a Read

	exited chan struct{} // closed once the command has been waited for
	swept  chan struct{} // closed once its session is gone after that
	once   sync.Once
}

// startPTY starts cmd with a new terminal of cols by rows as its stdin,
// stdout and stderr. pty.StartWithAttrs would set the size through Fd,
// which makes the master blocking for good.
func startPTY(cmd *exec.Cmd, cols, rows uint16) (*ptyTerm, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	defer tty.Close() // the command has its own copy
	t := &ptyTerm{cmd: cmd, master: master, exited: make(chan struct{}), swept: make(chan struct{})}
	if err := t.Resize(cols, rows); err != nil {
		master.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		master.Close()
		return nil, err
	}
	t.pid = cmd.Process.Pid
	go t.wait()
	return t, nil
}

// wait reaps the command; then the terminal ends with it, as a line that
// drops: what the command left running on it is hung up too.
func (t *ptyTerm) wait() {
	_ = t.cmd.Wait() // the process state says how it ended
	close(t.exited)
	endSession(t.pid)
	// Past this, output is what a process that left the session wrote.
	_ = t.master.SetReadDeadline(time.Now().Add(ptyDrain))
	close(t.swept)
}

// endSession hangs up what is left of session sid, killing what is still
// there after the grace period.
func endSession(sid int) {
	if proc.SignalSession(sid, syscall.SIGHUP) == 0 {
		return
	}
	for deadline := time.Now().Add(ptyHangupGrace); len(proc.InSession(sid)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			proc.SignalSession(sid, syscall.SIGKILL)
			return
		}
	}
}

// Read reads the terminal's output: io.EOF once the command has ended
// and nothing holds the terminal any more (or ptyDrain has passed).
func (t *ptyTerm) Read(p []byte) (int, error) {
	n, err := t.master.Read(p)
	if n > 0 || err == nil {
		return n, nil
	}
	if errors.Is(err, os.ErrClosed) {
		return 0, err
	}
	// EIO: no process holds the terminal; or the drain's deadline. Either
	// way the output ends with the command.
	<-t.exited
	return 0, io.EOF
}

// Write types p on the terminal.
func (t *ptyTerm) Write(p []byte) (int, error) { return t.master.Write(p) }

// Resize sets the terminal's size; the kernel tells the foreground
// process group with SIGWINCH.
func (t *ptyTerm) Resize(cols, rows uint16) error {
	return t.control(func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows})
	})
}

// Signal sends sig to the terminal's foreground process group: what ^C
// would reach, whether or not the program reads ^C as a character.
func (t *ptyTerm) Signal(sig unix.Signal) error {
	pgrp := 0
	err := t.control(func(fd int) error {
		var err error
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	if err == nil && pgrp > 0 {
		return unix.Kill(-pgrp, sig)
	}
	// The kernel cannot say which group is in the foreground (gVisor's
	// terminals cannot): its line discipline knows, for the signals it has
	// a character for, while the terminal makes characters signals.
	if sent, err := t.typeSignal(sig); sent || err != nil {
		return err
	}
	return unix.Kill(-t.pid, sig) // the session leader's group
}

// typeSignal types the character that makes the terminal send sig (^C
// for SIGINT), if it has one and makes signals of characters now.
func (t *ptyTerm) typeSignal(sig unix.Signal) (bool, error) {
	idx, ok := map[unix.Signal]int{unix.SIGINT: unix.VINTR, unix.SIGQUIT: unix.VQUIT, unix.SIGTSTP: unix.VSUSP}[sig]
	if !ok {
		return false, nil
	}
	var tio *unix.Termios
	if err := t.control(func(fd int) error {
		var err error
		tio, err = unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	}); err != nil || tio.Lflag&unix.ISIG == 0 || tio.Cc[idx] == 0 {
		return false, nil
	}
	_, err := t.master.Write([]byte{tio.Cc[idx]})
	return true, err
}

// control runs f on the master's descriptor without making it blocking,
// as Fd would.
func (t *ptyTerm) control(f func(fd int) error) error {
	rc, err := t.master.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Exit is how the command ended.
func (t *ptyTerm) Exit() agentproto.PTYExit {
	<-t.exited
	ps := t.cmd.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return agentproto.PTYExit{ExitCode: -1, Signal: agentproto.SignalName(ws.Signal())}
	}
	return agentproto.PTYExit{ExitCode: ps.ExitCode()}
}

// Close hangs the terminal up and frees it; it waits until the command
// and its session are gone.
func (t *ptyTerm) Close() error {
	t.once.Do(func() {
		select {
		case <-t.exited:
		default:
			proc.SignalSession(t.pid, syscall.SIGHUP)
			select {
			case <-t.exited:
			case <-time.After(ptyHangupGrace):
				proc.SignalSession(t.pid, syscall.SIGKILL)
				t.cmd.Process.Kill() // our child, even if it left its session
				<-t.exited
			}
		}
		<-t.swept
		t.master.Close()
	})
	return nil
}
