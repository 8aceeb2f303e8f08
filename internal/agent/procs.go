package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// DefaultProcDir is where background processes' output rings live in a
// sandbox: inside it, so they count against its own memory and disk, and
// are carried by its snapshots and branches with the agent's memory that
// indexes them.
const DefaultProcDir = "/run/cove/procs"

// Bounds of the process table.
const (
	maxRunning = 1024
	// maxExited is how many exited processes keep their status and
	// output; past it the oldest go.
	maxExited = 64
	// readChunk is the most a record of output carries.
	readChunk = agentproto.ChunkSize
)

// procTable is the agent's background processes, in start order.
type procTable struct {
	dir string

	mu    sync.Mutex
	procs []*bgProc
	seq   int // names ring files
}

// bgProc is one background process.
type bgProc struct {
	pid     int
	tag     string
	args    []string
	user    string
	cwd     string
	started time.Time
	limit   int64
	path    string // the ring's file
	out     *ring

	writeMu sync.Mutex // one stdin call at a time
	stdinMu sync.Mutex
	stdin   *os.File // the pipe's write end; nil once closed

	exited chan struct{} // closed when exit is set
	exit   agentproto.ProcExit
}

func (p *bgProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *bgProc) info() agentproto.ProcInfo {
	written, _, _ := p.out.state()
	p.stdinMu.Lock()
	open := p.stdin != nil
	p.stdinMu.Unlock()
	info := agentproto.ProcInfo{
		Pid: p.pid, Tag: p.tag, Args: p.args, User: p.user, Cwd: p.cwd, Running: p.running(),
		StartedUnixNano: p.started.UnixNano(), OutputSize: written, OutputLimit: p.limit, StdinOpen: open, Cove: true,
	}
	if !info.Running {
		exit := p.exit
		info.Exit = &exit
	}
	return info
}

// ProcStart starts a background process and returns at once.
func (a *Agent) ProcStart(ctx context.Context, req agentproto.ProcStartRequest) (agentproto.ProcInfo, error) {
	if err := req.Validate(); err != nil {
		return agentproto.ProcInfo{}, err
	}
	if req.OutputLimit == 0 {
		req.OutputLimit = agentproto.DefaultOutputLimit
	}
	t := a.procTable()
	cmd, err := a.procCommand(req.ExecRequest)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.admitLocked(req.Tag); err != nil {
		return agentproto.ProcInfo{}, err
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return agentproto.ProcInfo{}, fmt.Errorf("make the process directory: %w", err)
	}
	t.seq++
	p := &bgProc{tag: req.Tag, args: cmd.Args, user: req.User, cwd: cmd.Dir, limit: req.OutputLimit,
		path: filepath.Join(t.dir, strconv.Itoa(t.seq)+".log"), exited: make(chan struct{})}
	if p.out, err = newRing(p.path, req.OutputLimit); err != nil {
		return agentproto.ProcInfo{}, err
	}
	if err := p.start(cmd, time.Duration(req.TimeoutMs)*time.Millisecond); err != nil {
		p.out.close()
		os.Remove(p.path)
		return agentproto.ProcInfo{}, err
	}
	t.procs = append(t.procs, p)
	t.pruneLocked()
	a.log.Debug("process started", "pid", p.pid, "tag", p.tag, "argv", p.args)
	return p.info(), nil
}

// procCommand is the command req runs, as Exec would run it.
func (a *Agent) procCommand(req agentproto.ExecRequest) (*exec.Cmd, error) {
	c, lookErr, err := a.resolveCommand(req.Args, req.Shell, req.Cwd, req.User, req.Env)
	switch {
	case err != nil:
		return nil, err
	case lookErr != nil:
		return nil, agentproto.Errorf(agentproto.CodeInvalid, "%s: %v", c.argv[0], lookErr)
	}
	return a.cmd(nil, c), nil
}

// admitLocked refuses a start past maxRunning, or with a tag a running
// process has.
func (t *procTable) admitLocked(tag string) error {
	running := 0
	for _, p := range t.procs {
		if !p.running() {
			continue
		}
		running++
		if tag != "" && p.tag == tag {
			return agentproto.Errorf(agentproto.CodeState, "process %d is running with tag %s: pick another tag, or stop it first", p.pid, tag)
		}
	}
	if running >= maxRunning {
		return agentproto.Errorf(agentproto.CodeState, "%d background processes are running, the most a sandbox keeps: stop some first", running)
	}
	return nil
}

// pruneLocked forgets the oldest exited processes past maxExited.
func (t *procTable) pruneLocked() {
	exited := 0
	for _, p := range t.procs {
		if !p.running() {
			exited++
		}
	}
	kept := t.procs[:0]
	for _, p := range t.procs {
		if exited > maxExited && !p.running() {
			exited--
			p.out.close()
			os.Remove(p.path)
			continue
		}
		kept = append(kept, p)
	}
	clear(t.procs[len(kept):])
	t.procs = kept
}

// start starts cmd with a stdin pipe and its output into p's ring, and
// watches it to its end.
func (p *bgProc) start(cmd *exec.Cmd, timeout time.Duration) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	capt, err := captureOutput(cmd, streamTo{p.out, agentproto.Stdout}, streamTo{p.out, agentproto.Stderr})
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	cmd.Stdin = inR
	err = cmd.Start()
	// The process holds its ends now; on failure the readers see EOF.
	closeFiles(cmd.Stdout, cmd.Stderr)
	inR.Close()
	if err != nil {
		inW.Close()
		return fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	p.pid, p.started, p.stdin = cmd.Process.Pid, time.Now(), inW
	go p.watch(cmd, timeout, capt)
	return nil
}

// streamTo writes one of a process's streams into its ring.
type streamTo struct {
	r      *ring
	stream byte
}

func (w streamTo) Write(b []byte) (int, error) {
	w.r.append(w.stream, b)
	return len(b), nil
}

// watch waits for the process to end, records how, and marks its output
// complete once its pipes are drained: at their EOF, or, when a child it
// left behind holds them open, once nothing more is in them.
func (p *bgProc) watch(cmd *exec.Cmd, timeout time.Duration, capt *capture) {
	var timedOut bool
	var timer *time.Timer
	var timerMu sync.Mutex
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() {
			timerMu.Lock()
			timedOut = true
			timerMu.Unlock()
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
	}
	_ = cmd.Wait() // the process state says how it ended
	if timer != nil {
		timer.Stop()
	}
	timerMu.Lock()
	exit := agentproto.ProcExit{ExitCode: -1, TimedOut: timedOut, DurationMs: time.Since(p.started).Milliseconds()}
	timerMu.Unlock()
	if ps := cmd.ProcessState; ps != nil {
		exit.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = signalName(ws.Signal())
		}
	}
	p.exit = exit
	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinMu.Unlock()
	close(p.exited)
	capt.wait()
	p.out.finish()
}

func (a *Agent) procTable() *procTable {
	a.procsOnce.Do(func() {
		dir := a.procDir
		if dir == "" {
			dir = DefaultProcDir
		}
		a.procs = &procTable{dir: dir}
	})
	return a.procs
}

// lookup finds the process ref names: by pid, the running one else the
// latest; by tag, likewise.
func (t *procTable) lookup(ref agentproto.ProcRef) (*bgProc, error) {
	if ref.Pid == 0 && ref.Tag == "" {
		return nil, agentproto.Errorf(agentproto.CodeInvalid, "name a process by pid or tag")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var found *bgProc
	for i := len(t.procs) - 1; i >= 0; i-- {
		p := t.procs[i]
		if (ref.Pid != 0 && p.pid != ref.Pid) || (ref.Tag != "" && p.tag != ref.Tag) {
			continue
		}
		if p.running() {
			return p, nil
		}
		if found == nil {
			found = p
		}
	}
	if found == nil {
		return nil, agentproto.Errorf(agentproto.CodeNoProcess, "no background process with %s", ref)
	}
	return found, nil
}

// closeProcs kills every running background process and removes the
// output rings: the agent is going away.
func (a *Agent) closeProcs() {
	t := a.procTable()
	t.mu.Lock()
	procs := t.procs
	t.procs = nil
	t.mu.Unlock()
	for _, p := range procs {
		if p.running() {
			killGroup(p.pid)
			syscall.Kill(p.pid, syscall.SIGKILL) // in case it left its group
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
			}
		}
		p.out.close()
		os.Remove(p.path)
	}
}

// errProcExited is the error of a call that needs a running process.
func errProcExited(p *bgProc, what string) error {
	how := fmt.Sprintf("exit code %d", p.exit.ExitCode)
	if p.exit.Signal != "" {
		how = p.exit.Signal
	}
	return agentproto.Errorf(agentproto.CodeState, "cannot %s: process %d has exited (%s)", what, p.pid, how)
}
