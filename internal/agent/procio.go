package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/proc"
)

// ProcList lists the agent's background processes and, with All, the
// sandbox's others.
func (a *Agent) ProcList(ctx context.Context, req agentproto.ProcListRequest) (agentproto.ProcListResult, error) {
	t := a.procTable()
	t.mu.Lock()
	procs := append([]*bgProc(nil), t.procs...)
	t.mu.Unlock()
	res := agentproto.ProcListResult{Procs: make([]agentproto.ProcInfo, 0, len(procs))}
	ours := map[int]bool{os.Getpid(): true, os.Getppid(): true}
	for _, p := range procs {
		info := p.info()
		res.Procs = append(res.Procs, info)
		if info.Running {
			ours[p.pid] = true
		}
	}
	if req.All {
		res.Procs = append(res.Procs, otherProcs(ours)...)
	}
	return res, nil
}

// otherProcs describes the sandbox's processes that are not in skip, from
// /proc. Kernel threads, which have no command line, are left out.
func otherProcs(skip map[int]bool) []agentproto.ProcInfo {
	ents, _ := os.ReadDir("/proc")
	names := map[string]string{}
	var out []agentproto.ProcInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		args, err := proc.Cmdline(pid)
		if err != nil || len(args) == 0 || args[0] == "" {
			continue
		}
		info := agentproto.ProcInfo{Pid: pid, Args: args, Running: true, User: procUser(pid, names)}
		info.Cwd, _ = os.Readlink("/proc/" + e.Name() + "/cwd")
		out = append(out, info)
	}
	return out
}

// procUser names the real user of pid, through names (uid to name).
func procUser(pid int, names map[string]string) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return ""
		}
		uid := fields[0]
		if name, ok := names[uid]; ok {
			return name
		}
		name := uid
		if u, err := user.LookupId(uid); err == nil {
			name = u.Username
		}
		names[uid] = name
		return name
	}
	return ""
}

// ProcGet describes one background process.
func (a *Agent) ProcGet(ctx context.Context, ref agentproto.ProcRef) (agentproto.ProcInfo, error) {
	p, err := a.procTable().lookup(ref)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	return p.info(), nil
}

// ProcRemove forgets an exited process: its status, and its output ring.
func (a *Agent) ProcRemove(ctx context.Context, ref agentproto.ProcRef) error {
	t := a.procTable()
	p, err := t.lookup(ref)
	if err != nil {
		return err
	}
	if p.running() {
		return agentproto.Errorf(agentproto.CodeState, "process %d is running: signal it first, and remove it once it has exited", p.pid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, q := range t.procs {
		if q == p {
			t.procs = append(t.procs[:i], t.procs[i+1:]...)
			p.out.close()
			os.Remove(p.path)
			break
		}
	}
	return nil
}

// ProcSignal sends a signal to a running process's group (to the process
// alone if it left its group).
func (a *Agent) ProcSignal(ctx context.Context, req agentproto.ProcSignalRequest) (agentproto.ProcInfo, error) {
	sig, err := parseSignal(req.Signal)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	p, err := a.procTable().lookup(req.ProcRef)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	if !p.running() {
		return agentproto.ProcInfo{}, errProcExited(p, "signal it")
	}
	err = syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = syscall.Kill(p.pid, sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		// It ended, and is being reaped.
		select {
		case <-p.exited:
			return agentproto.ProcInfo{}, errProcExited(p, "signal it")
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return agentproto.ProcInfo{}, fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return p.info(), nil
}

// parseSignal reads a signal by name ("TERM", "SIGTERM", any case) or
// number.
func parseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return 0, agentproto.Errorf(agentproto.CodeInvalid, "name a signal: TERM, KILL, INT, HUP, or a number")
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, agentproto.Errorf(agentproto.CodeInvalid, "signal %d is not between 1 and 64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, agentproto.Errorf(agentproto.CodeInvalid, "unknown signal %.40q: try TERM, KILL, INT, HUP, USR1, or a number", s)
}

// signalName names sig as the exit status reports it: "SIGTERM".
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

// ProcOutput reads a process's output from an offset, or follows it.
func (a *Agent) ProcOutput(ctx context.Context, req agentproto.ProcOutputRequest) (agentproto.ProcMark, func(io.Writer) error, error) {
	if req.Offset < 0 || req.Limit < 0 {
		return agentproto.ProcMark{}, nil, agentproto.Errorf(agentproto.CodeInvalid, "offset and limit must not be negative")
	}
	p, err := a.procTable().lookup(req.ProcRef)
	if err != nil {
		return agentproto.ProcMark{}, nil, err
	}
	_, start, lost, err := p.out.read(req.Offset, 0)
	if err != nil {
		return agentproto.ProcMark{}, nil, err
	}
	send := func(w io.Writer) error { return p.sendOutput(ctx, w, start, req.Limit, req.Follow) }
	return agentproto.ProcMark{Offset: start, Lost: lost}, send, nil
}

// sendOutput writes p's output from off as records: Chunks, a mark at each
// gap the ring wrapped over, and a last mark, Done. It stops after limit
// bytes (0: none), at the end of what there is unless follow, and at the
// end of the process's output.
func (p *bgProc) sendOutput(ctx context.Context, w io.Writer, off, limit int64, follow bool) error {
	for remaining := limit; limit == 0 || remaining > 0; {
		n := int64(readChunk)
		if limit > 0 {
			n = min(n, remaining)
		}
		written, done, changed := p.out.state()
		chunks, start, lost, err := p.out.read(off, int(n))
		if err != nil {
			return err
		}
		if lost > 0 {
			if err := agentproto.WriteJSON(w, agentproto.ProcMark{Offset: start, Lost: lost}); err != nil {
				return err
			}
		}
		off = start
		for _, c := range chunks {
			if err := agentproto.WriteChunk(w, c.stream, c.data); err != nil {
				return err
			}
			off += int64(len(c.data))
			remaining -= int64(len(c.data))
		}
		if len(chunks) > 0 {
			continue
		}
		if (done && off >= written) || !follow {
			break
		}
		if err := waitChange(ctx, changed); err != nil {
			return err
		}
	}
	mark := agentproto.ProcMark{Offset: off, Done: true}
	if written, done, _ := p.out.state(); done && off >= written {
		exit := p.exit
		mark.Exit = &exit
	}
	return agentproto.WriteJSON(w, mark)
}

// ProcStdin checks that the process's stdin is open, and returns the copy
// into it.
func (a *Agent) ProcStdin(ctx context.Context, req agentproto.ProcStdinRequest) (func(io.Reader) (agentproto.ProcStdinResult, error), error) {
	p, err := a.procTable().lookup(req.ProcRef)
	if err != nil {
		return nil, err
	}
	if p.stdinFile() == nil {
		return nil, p.stdinClosed()
	}
	return func(r io.Reader) (agentproto.ProcStdinResult, error) { return p.copyStdin(ctx, r, req.Close) }, nil
}

func (p *bgProc) stdinFile() *os.File {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	return p.stdin
}

func (p *bgProc) stdinClosed() error {
	if !p.running() {
		return errProcExited(p, "write its stdin")
	}
	return agentproto.Errorf(agentproto.CodeState, "the stdin of process %d is closed", p.pid)
}

// copyStdin copies r to p's stdin, one call at a time, and closes stdin
// after if closeAfter. A host that goes away, or a process that ends,
// ends the copy even while a write waits for the process to read.
func (p *bgProc) copyStdin(ctx context.Context, r io.Reader, closeAfter bool) (agentproto.ProcStdinResult, error) {
	var res agentproto.ProcStdinResult
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	f := p.stdinFile()
	if f == nil {
		return res, p.stdinClosed()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bufs, readErr := readAhead(ctx, cancel, r)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		f.SetWriteDeadline(time.Now())
	})
	var werr error
	for b := range bufs {
		n, err := f.Write(b)
		res.Written += int64(n)
		if err != nil {
			werr = err
			cancel()
			break
		}
	}
	if !stop() {
		<-fired
		f.SetWriteDeadline(time.Time{})
	}
	switch {
	case werr != nil && p.stdinFile() == nil:
		return res, p.stdinClosed()
	case werr != nil && (errors.Is(werr, syscall.EPIPE) || errors.Is(werr, os.ErrClosed)):
		return res, agentproto.Errorf(agentproto.CodeState, "process %d closed its stdin", p.pid)
	case werr != nil:
		return res, fmt.Errorf("write stdin of process %d: %w", p.pid, werr)
	}
	if err := <-readErr; err != nil {
		return res, err
	}
	if closeAfter {
		p.stdinMu.Lock()
		if p.stdin != nil {
			p.stdin.Close()
			p.stdin = nil
		}
		p.stdinMu.Unlock()
		res.Closed = true
	}
	return res, nil
}

// readAhead reads r into buffers sent on the first channel, so that the
// host's end is watched while a write waits; the second gets the read's
// outcome (nil at EOF) once the first is closed. A failed read cancels.
func readAhead(ctx context.Context, cancel context.CancelFunc, r io.Reader) (<-chan []byte, <-chan error) {
	bufs := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		defer close(bufs)
		for {
			buf := make([]byte, 64<<10)
			n, err := r.Read(buf)
			if n > 0 {
				select {
				case bufs <- buf[:n]:
				case <-ctx.Done():
					readErr <- ctx.Err()
					return
				}
			}
			if err == io.EOF {
				readErr <- nil
				return
			}
			if err != nil {
				readErr <- err
				cancel()
				return
			}
		}
	}()
	return bufs, readErr
}
