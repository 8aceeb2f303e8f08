package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// pipeGrace is how long Exec waits, once the command has exited, for the
// output pipes to close, before it looks whether they are merely held open.
// A background child (`server &`) keeps them open for as long as it runs;
// the call must not wait for it, and the child must not die of SIGPIPE
// either, so its output is drained and dropped after. But on a loaded guest
// the readers may not even have run yet: Exec waits on (up to pipeMax)
// while output is still in a pipe or on its way into the result.
const (
	pipeGrace = 250 * time.Millisecond
	pipeMax   = 30 * time.Second
)

// errExecTimeout is the cause of an exec context that ended by the
// request's own timeout, as opposed to a cancel from the host.
var errExecTimeout = errors.New("exec timeout")

// defaultEnv is the environment every command starts from. The agent's own
// environment is not passed on: as PID 1 it is whatever the runtime chose.
func defaultEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
		"TERM=xterm",
	}
}

// Exec runs a command to completion in its own process group.
func (a *Agent) Exec(ctx context.Context, req agentproto.ExecRequest) (agentproto.ExecResult, error) {
	c, notRun, err := a.newExecCmd(ctx, req)
	if err != nil || notRun != nil {
		return deref(notRun), err
	}
	defer c.cancel()
	var stdout, stderr capBuffer
	if notRun, err := c.run(&stdout, &stderr, nil); err != nil || notRun != nil {
		return deref(notRun), err
	}
	stdout.freeze()
	stderr.freeze()

	// Each stream may take twice MaxOutput once escaped: see jsonFit.
	outStr, outCut := jsonFit(stdout.String(), 2*agentproto.MaxOutput)
	errStr, errCut := jsonFit(stderr.String(), 2*agentproto.MaxOutput)
	st := c.status()
	res := agentproto.ExecResult{
		Stdout:     outStr,
		Stderr:     errStr,
		ExitCode:   st.ExitCode,
		TimedOut:   st.TimedOut,
		Truncated:  stdout.truncated || stderr.truncated || outCut || errCut,
		DurationMs: st.DurationMs,
	}
	a.log.Debug("exec", "argv", c.Args, "exit", res.ExitCode, "timed_out", res.TimedOut, "ms", res.DurationMs)
	return res, nil
}

// deref is *r, or the zero result for nil.
func deref(r *agentproto.ExecResult) agentproto.ExecResult {
	if r == nil {
		return agentproto.ExecResult{}
	}
	return *r
}

// execCmd is a command set up to run: the steps the buffered and the
// streamed exec share.
type execCmd struct {
	*exec.Cmd
	start  time.Time
	ctx    context.Context // ends at the request's timeout or the host's cancel
	cancel context.CancelFunc
	killed atomic.Bool
}

// newExecCmd validates req and sets up its command: argv, user, working
// directory, environment, timeout, and a process group killed whole when
// the call ends early. A command that cannot be found or run is not an
// error: notRun is the result a shell would report for it.
func (a *Agent) newExecCmd(ctx context.Context, req agentproto.ExecRequest) (c *execCmd, notRun *agentproto.ExecResult, err error) {
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	rc, lookErr, err := a.resolveCommand(req.Args, req.Shell, req.Cwd, req.User, req.Env)
	if err != nil {
		return nil, nil, err
	}
	if lookErr != nil {
		res := notRunnable(rc.argv[0], lookErr, start)
		return nil, &res, nil
	}
	c = &execCmd{start: start}
	if req.TimeoutMs > 0 {
		c.ctx, c.cancel = context.WithTimeoutCause(ctx, time.Duration(req.TimeoutMs)*time.Millisecond, errExecTimeout)
	} else {
		c.ctx, c.cancel = context.WithCancel(ctx)
	}
	cmd := a.cmd(c.ctx, rc)
	if req.Stdin != nil {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	cmd.Cancel = func() error {
		c.killed.Store(true)
		return killGroup(cmd.Process.Pid)
	}
	c.Cmd = cmd
	return c, nil, nil
}

// run starts the command with its stdout and stderr copied to out and
// errOut, calls started (if not nil) once it runs, and waits for it to
// exit and for its output to be read (see pipeGrace). An execve failure
// that a shell would report with an exit status is returned as notRun.
func (c *execCmd) run(out, errOut io.Writer, started func() error) (notRun *agentproto.ExecResult, err error) {
	name := c.Args[0]
	capt, err := captureOutput(c.Cmd, out, errOut)
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", name, err)
	}
	if err := c.Start(); err != nil {
		closeFiles(c.Stdout, c.Stderr)
		if res, ok := startFailure(name, err, c.start); ok {
			return &res, nil
		}
		return nil, fmt.Errorf("exec %s: %w", name, err)
	}
	// Only the command (and its children) may hold the write ends now, so
	// the readers see EOF when the last of them exits.
	closeFiles(c.Stdout, c.Stderr)
	if started != nil {
		started()
	}
	// Wait's error is not needed: the process state says how the command
	// ended.
	_ = c.Wait()
	capt.wait()
	return nil, nil
}

// status is how the command, which has been run, ended.
func (c *execCmd) status() agentproto.ExecStatus {
	st := agentproto.ExecStatus{
		ExitCode:   -1,
		TimedOut:   c.killed.Load() && context.Cause(c.ctx) == errExecTimeout,
		DurationMs: time.Since(c.start).Milliseconds(),
	}
	if ps := c.ProcessState; ps != nil {
		st.ExitCode = ps.ExitCode() // -1 when killed by a signal
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = unix.SignalName(ws.Signal())
		}
	}
	return st
}

// procAttr is what every process the agent starts runs with: a process
// group of its own, killed whole at a timeout, and the agent's cgroup for
// commands if it has one.
func (a *Agent) procAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if a.cgroup != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, int(a.cgroup.Fd())
	}
	return attr
}

// execDir returns the directory a command runs in.
func (a *Agent) execDir(cwd string) (string, error) {
	if cwd == "" {
		// Recreate the work directory if something removed it: a command
		// without a cwd should not fail because of it.
		if err := os.MkdirAll(a.workDir, 0o755); err != nil {
			return "", fsError(err)
		}
		return a.workDir, nil
	}
	dir, err := a.resolve(cwd)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fsError(fmt.Errorf("cwd: %w", err))
	}
	if !fi.IsDir() {
		return "", agentproto.Errorf(agentproto.CodeInvalid, "cwd %s is not a directory", dir)
	}
	return dir, nil
}

// killGroup kills the process group led by pid, which takes background
// children along with the command.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// notRunnable is the result for a command that could not be found or
// run, reported the way a shell would rather than as a protocol error.
func notRunnable(name string, err error, start time.Time) agentproto.ExecResult {
	code, why := 127, "command not found"
	if errors.Is(err, fs.ErrPermission) {
		code, why = 126, "permission denied"
	}
	return agentproto.ExecResult{
		Stderr:     fmt.Sprintf("%s: %s\n", name, why),
		ExitCode:   code,
		DurationMs: time.Since(start).Milliseconds(),
	}
}

// startFailure turns an execve failure that a shell would report with an
// exit status (a script's missing interpreter, a binary for another
// machine) into such a result.
func startFailure(name string, err error, start time.Time) (agentproto.ExecResult, bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return agentproto.ExecResult{}, false
	}
	code := 126
	switch errno {
	case syscall.ENOENT:
		code = 127
	case syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.EISDIR, syscall.ETXTBSY:
	default:
		return agentproto.ExecResult{}, false
	}
	return agentproto.ExecResult{
		Stderr:     fmt.Sprintf("%s: %v\n", name, errno),
		ExitCode:   code,
		DurationMs: time.Since(start).Milliseconds(),
	}, true
}

// envValue returns the value of the last key= entry in env.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if len(env[i]) > len(key) && env[i][len(key)] == '=' && env[i][:len(key)] == key {
			return env[i][len(key)+1:]
		}
	}
	return ""
}

// capture is the reading end of a command's stdout and stderr.
type capture struct {
	drained <-chan struct{} // closed once both pipes reach EOF
	readers [2]*pipeReader
}

// wait waits, once the command has exited, until its output is read: to
// the pipes' EOF, or, when a child it left behind holds them open, until
// nothing more is in them (see pipeGrace), for pipeMax at most.
func (c *capture) wait() {
	for deadline := time.Now().Add(pipeMax); ; {
		select {
		case <-c.drained:
		case <-time.After(pipeGrace):
			if !c.settled() && time.Now().Before(deadline) {
				continue
			}
		}
		return
	}
}

// settled reports whether everything written to the pipes so far is in
// the buffers: both readers wait in a read, with nothing left in the pipe.
func (c *capture) settled() bool {
	for _, r := range c.readers {
		if !r.settled() {
			return false
		}
	}
	return true
}

// pipeReader copies a pipe into a buffer and tells whether it is idle.
type pipeReader struct {
	r    *os.File
	dst  io.Writer
	idle atomic.Bool // in a Read, with all it read before in dst
}

func (p *pipeReader) run() {
	defer p.r.Close()
	buf := make([]byte, pipeSize)
	for {
		p.idle.Store(true)
		n, err := p.r.Read(buf)
		p.idle.Store(false)
		p.dst.Write(buf[:n])
		if err != nil {
			p.idle.Store(true)
			return
		}
	}
}

func (p *pipeReader) settled() bool {
	if !p.idle.Load() {
		return false
	}
	rc, err := p.r.SyscallConn()
	if err != nil {
		return true // closed: read to EOF
	}
	pending := 0
	rc.Control(func(fd uintptr) { pending, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }) // FIONREAD
	return pending == 0
}

// captureOutput connects the command's stdout and stderr to pipes whose
// readers copy into out and errOut, whose errors they ignore.
func captureOutput(cmd *exec.Cmd, out, errOut io.Writer) (*capture, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	growPipe(outR)
	growPipe(errR)
	cmd.Stdout, cmd.Stderr = outW, errW
	drained := make(chan struct{})
	c := &capture{drained: drained, readers: [2]*pipeReader{{r: outR, dst: out}, {r: errR, dst: errOut}}}
	var wg sync.WaitGroup
	for _, r := range c.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run()
		}()
	}
	go func() {
		wg.Wait()
		close(drained)
	}()
	return c, nil
}

// pipeSize is the capacity asked for the output pipes, and what one read
// of them takes: a chatty command then costs fewer reads, and a streamed
// exec fewer chunks (each some writes to the host), than the default
// 64 KiB pipe would.
const pipeSize = 256 << 10

// growPipe asks for a pipe of pipeSize, as far as the kernel allows: a
// smaller one only costs more reads. Control keeps the file in the
// runtime's poller, which Fd would take it out of.
func growPipe(r *os.File) {
	if rc, err := r.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

func closeFiles(ws ...io.Writer) {
	for _, w := range ws {
		if f, ok := w.(*os.File); ok {
			f.Close()
		}
	}
}

// capBuffer keeps the first agentproto.MaxOutput bytes written to it and
// swallows the rest, so that a chatty command never sees a write fail.
// After freeze it swallows everything: the result has been taken.
type capBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
	frozen    bool
}

func (b *capBuffer) freeze() {
	b.mu.Lock()
	b.frozen = true
	b.mu.Unlock()
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if b.frozen {
		return n, nil
	}
	if room := agentproto.MaxOutput - b.buf.Len(); len(p) > room {
		p = p[:max(room, 0)]
		b.truncated = true
	}
	b.buf.Write(p)
	return n, nil
}

func (b *capBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
