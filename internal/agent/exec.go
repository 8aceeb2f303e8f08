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
	var res agentproto.ExecResult
	if err := req.Validate(); err != nil {
		return res, err
	}
	dir, err := a.execDir(req.Cwd)
	if err != nil {
		return res, err
	}
	argv := req.Args
	if req.Shell != "" {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	acct, err := lookupUser(req.User)
	if err != nil {
		return res, err
	}
	// Later entries win (os/exec keeps the last of duplicate keys), so the
	// request's entries override the defaults.
	env := append(append(defaultEnv(), acct.env()...), req.Env...)

	start := time.Now()
	prog, err := lookPath(argv[0], envValue(env, "PATH"), dir)
	if err != nil {
		return notRunnable(argv[0], err, start), nil
	}

	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(req.TimeoutMs)*time.Millisecond, errExecTimeout)
		defer cancel()
	}
	var stdout, stderr capBuffer
	var killed atomic.Bool
	cmd := exec.CommandContext(ctx, prog)
	cmd.Args = argv
	cmd.Dir = dir
	cmd.Env = env
	if req.Stdin != nil {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	cmd.SysProcAttr = a.procAttr()
	cmd.SysProcAttr.Credential = acct.credential()
	cmd.Cancel = func() error {
		killed.Store(true)
		return killGroup(cmd.Process.Pid)
	}
	out, err := captureOutput(cmd, &stdout, &stderr)
	if err != nil {
		return res, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	if err := cmd.Start(); err != nil {
		closeFiles(cmd.Stdout, cmd.Stderr)
		if res, ok := startFailure(argv[0], err, start); ok {
			return res, nil
		}
		return res, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	// Only the command (and its children) may hold the write ends now, so
	// the readers see EOF when the last of them exits.
	closeFiles(cmd.Stdout, cmd.Stderr)
	// Wait's error is not needed: the process state says how the command
	// ended.
	_ = cmd.Wait()
	for deadline := time.Now().Add(pipeMax); ; {
		select {
		case <-out.drained:
		case <-time.After(pipeGrace):
			if !out.settled() && time.Now().Before(deadline) {
				continue
			}
		}
		break
	}
	stdout.freeze()
	stderr.freeze()

	// Each stream may take twice MaxOutput once escaped: see jsonFit.
	outStr, outCut := jsonFit(stdout.String(), 2*agentproto.MaxOutput)
	errStr, errCut := jsonFit(stderr.String(), 2*agentproto.MaxOutput)
	res = agentproto.ExecResult{
		Stdout:     outStr,
		Stderr:     errStr,
		ExitCode:   -1,
		TimedOut:   killed.Load() && context.Cause(ctx) == errExecTimeout,
		Truncated:  stdout.truncated || stderr.truncated || outCut || errCut,
		DurationMs: time.Since(start).Milliseconds(),
	}
	if ps := cmd.ProcessState; ps != nil {
		res.ExitCode = ps.ExitCode() // -1 when killed by a signal
	}
	a.log.Debug("exec", "argv", argv, "exit", res.ExitCode, "timed_out", res.TimedOut, "ms", res.DurationMs)
	return res, nil
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
	dst  *capBuffer
	idle atomic.Bool // in a Read, with all it read before in dst
}

func (p *pipeReader) run() {
	defer p.r.Close()
	buf := make([]byte, 32<<10)
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
// readers copy into out and errOut.
func captureOutput(cmd *exec.Cmd, out, errOut *capBuffer) (*capture, error) {
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
