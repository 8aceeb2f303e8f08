package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Errors of the process calls, refinements of the sentinels.
var (
	// ErrProcessNotFound is ErrNotFound for a pid or tag that names no
	// background process of the sandbox's.
	ErrProcessNotFound = fmt.Errorf("%w", ErrNotFound)
	// ErrProcessState is ErrConflict for a call the process's state
	// refuses: a signal to a process that exited, stdin to a closed stdin,
	// a tag a running process has.
	ErrProcessState = fmt.Errorf("%w", ErrConflict)
)

// Bounds of reading a process's output by offset.
const (
	DefaultOutputRead = 1 << 20
	MaxOutputRead     = 16 << 20
)

// ProcessRequest starts a background process: Args or Shell, as an exec
// takes them, and the process's own Tag (unique among running ones) and
// OutputLimit (the bytes of output it keeps; 0: the default).
type ProcessRequest struct {
	Args        []string
	Shell       string
	Cwd         string
	Env         []string
	Timeout     time.Duration // kills the process group; 0: none
	User        string
	Tag         string
	OutputLimit int64
}

// ExitStatus is how a process ended. ExitCode is -1 when Signal ended it.
type ExitStatus struct {
	ExitCode int
	Signal   string // "SIGTERM"
	TimedOut bool
	Duration time.Duration
}

// ProcessInfo describes a process: one cove started (Cove), or another
// of the sandbox's.
type ProcessInfo struct {
	Pid         int
	Tag         string
	Args        []string
	User, Cwd   string
	Running     bool
	Exit        *ExitStatus // once it ended
	StartedAt   time.Time
	OutputSize  int64 // bytes it wrote, stdout and stderr together
	OutputLimit int64 // bytes of them kept
	StdinOpen   bool
	Cove        bool
}

// ProcessRef names a process by pid or by tag.
type ProcessRef struct {
	Pid int
	Tag string
}

// ParseProcessRef reads a pid or a tag.
func ParseProcessRef(s string) (ProcessRef, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 {
			return ProcessRef{}, invalidf("pid %d: a pid is positive", n)
		}
		return ProcessRef{Pid: n}, nil
	}
	if s == "" {
		return ProcessRef{}, invalidf("name a process by pid or tag")
	}
	if err := agentproto.CheckTag(s); err != nil {
		return ProcessRef{}, mapErr(err)
	}
	return ProcessRef{Tag: s}, nil
}

func (r ProcessRef) proto() agentproto.ProcRef { return agentproto.ProcRef{Pid: r.Pid, Tag: r.Tag} }

// OutputEvent is a piece of a process's output: a chunk of Data from
// Stream ("stdout", "stderr") at Offset; or, when Data is empty, a gap of
// Lost bytes the process's ring no longer held before Offset; or the last
// event (Done), where Offset is where the next read starts and Exit is set
// when the process ended and all its output was read.
type OutputEvent struct {
	Stream string
	Offset int64
	Data   []byte
	Lost   int64
	Done   bool
	Exit   *ExitStatus
}

// OutputRead is a part of a process's output read by offset.
type OutputRead struct {
	Chunks     []OutputEvent // each with Data
	Offset     int64         // where the first chunk starts
	NextOffset int64
	Lost       int64       // bytes before Offset the ring no longer held
	Exit       *ExitStatus // set when the process ended and nothing is left to read
}

// StartProcess starts a background process and returns at once.
func (sb *Sandbox) StartProcess(ctx context.Context, req ProcessRequest) (ProcessInfo, error) {
	req.User, req.Cwd, req.Env = sb.b.runDefaults(req.User, req.Cwd, req.Env)
	preq := agentproto.ProcStartRequest{
		ExecRequest: agentproto.ExecRequest{Args: req.Args, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env,
			TimeoutMs: req.Timeout.Milliseconds(), User: req.User},
		Tag: req.Tag, OutputLimit: req.OutputLimit,
	}
	if err := preq.Validate(); err != nil {
		return ProcessInfo{}, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return ProcessInfo{}, err
	}
	sb.s.cfg.Meter.Exec(sb.b.rec.ID)
	info, err := a.ProcStart(ctx, preq)
	if err != nil {
		return ProcessInfo{}, sb.procErr(err)
	}
	return processInfo(info), nil
}

// Processes lists the background processes cove started in the sandbox,
// and with all, its other processes too.
func (sb *Sandbox) Processes(ctx context.Context, all bool) ([]ProcessInfo, error) {
	a, err := sb.agent(ctx)
	if err != nil {
		return nil, err
	}
	res, err := a.ProcList(ctx, agentproto.ProcListRequest{All: all})
	if err != nil {
		return nil, sb.procErr(err)
	}
	out := make([]ProcessInfo, len(res.Procs))
	for i, p := range res.Procs {
		out[i] = processInfo(p)
	}
	return out, nil
}

// Process describes one background process.
func (sb *Sandbox) Process(ctx context.Context, ref ProcessRef) (ProcessInfo, error) {
	a, err := sb.agent(ctx)
	if err != nil {
		return ProcessInfo{}, err
	}
	info, err := a.ProcGet(ctx, ref.proto())
	if err != nil {
		return ProcessInfo{}, sb.procErr(err)
	}
	return processInfo(info), nil
}

// Signal sends sig (a name such as "TERM" or "SIGKILL", or a number) to a
// running process's group.
func (sb *Sandbox) Signal(ctx context.Context, ref ProcessRef, sig string) (ProcessInfo, error) {
	if sig == "" {
		return ProcessInfo{}, invalidf("name a signal: TERM, KILL, INT, HUP, or a number")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return ProcessInfo{}, err
	}
	info, err := a.ProcSignal(ctx, agentproto.ProcSignalRequest{ProcRef: ref.proto(), Signal: sig})
	if err != nil {
		return ProcessInfo{}, sb.procErr(err)
	}
	return processInfo(info), nil
}

// RemoveProcess forgets an exited process, its status and its output; a
// running one is ErrProcessState.
func (sb *Sandbox) RemoveProcess(ctx context.Context, ref ProcessRef) error {
	a, err := sb.agent(ctx)
	if err != nil {
		return err
	}
	if err := a.ProcRemove(ctx, ref.proto()); err != nil {
		return sb.procErr(err)
	}
	return nil
}

// WriteStdin copies r to a process's stdin as it reads it, and closes
// stdin after if closeAfter. It returns how many bytes reached the pipe.
func (sb *Sandbox) WriteStdin(ctx context.Context, ref ProcessRef, r io.Reader, closeAfter bool) (int64, error) {
	a, err := sb.agent(ctx)
	if err != nil {
		return 0, err
	}
	res, err := a.ProcStdin(ctx, agentproto.ProcStdinRequest{ProcRef: ref.proto(), Close: closeAfter}, r)
	if err != nil {
		return res.Written, sb.procErr(err)
	}
	return res.Written, nil
}

// ProcessOutput reads at most limit bytes (0: DefaultOutputRead) of a
// process's output from offset. An offset older than the process keeps
// starts at its oldest byte, and Lost says how many were skipped.
func (sb *Sandbox) ProcessOutput(ctx context.Context, ref ProcessRef, offset, limit int64) (OutputRead, error) {
	if limit == 0 {
		limit = DefaultOutputRead
	}
	if limit < 0 || limit > MaxOutputRead {
		return OutputRead{}, invalidf("limit %d is not between 1 and %d bytes", limit, MaxOutputRead)
	}
	out := OutputRead{Offset: -1}
	err := sb.readOutput(ctx, ref, offset, limit, false, func(ev OutputEvent) error {
		switch {
		case len(ev.Data) > 0:
			out.Chunks = append(out.Chunks, ev)
		case ev.Done:
			out.NextOffset, out.Exit = ev.Offset, ev.Exit
		default:
			out.Lost += ev.Lost
		}
		if out.Offset < 0 {
			out.Offset = ev.Offset
		}
		return nil
	})
	return out, err
}

// FollowOutput calls each with a process's output from offset on as it
// is produced, until the process ends (the last event is Done, with Exit),
// ctx ends or each fails. A gap the ring wrapped over is an event with
// Lost.
func (sb *Sandbox) FollowOutput(ctx context.Context, ref ProcessRef, offset int64, each func(OutputEvent) error) error {
	return sb.readOutput(ctx, ref, offset, 0, true, each)
}

// StreamOutput calls each with the output there is from offset on, at
// most limit bytes (0: all), then a last event (Done).
func (sb *Sandbox) StreamOutput(ctx context.Context, ref ProcessRef, offset, limit int64, each func(OutputEvent) error) error {
	if limit < 0 {
		return invalidf("limit %d: a limit is not negative", limit)
	}
	return sb.readOutput(ctx, ref, offset, limit, false, each)
}

func (sb *Sandbox) readOutput(ctx context.Context, ref ProcessRef, offset, limit int64, follow bool, each func(OutputEvent) error) error {
	if offset < 0 {
		return invalidf("offset %d: an offset is not negative", offset)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return err
	}
	st, mark, err := a.ProcOutput(ctx, agentproto.ProcOutputRequest{ProcRef: ref.proto(), Offset: offset, Limit: limit, Follow: follow})
	if err != nil {
		return sb.procErr(err)
	}
	defer st.Close()
	off := mark.Offset
	if mark.Lost > 0 {
		if err := each(OutputEvent{Offset: off, Lost: mark.Lost}); err != nil {
			return err
		}
	}
	for {
		rec, err := st.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return sb.fail(fmt.Errorf("read the process's output: %w", err))
		}
		switch rec.Kind {
		case agentproto.RecordChunk:
			ev := OutputEvent{Stream: agentproto.StreamName(rec.Stream), Offset: off, Data: rec.Data}
			off += int64(len(rec.Data))
			err = each(ev)
		case agentproto.RecordJSON:
			var m agentproto.ProcMark
			if err = rec.Decode(&m); err != nil {
				break
			}
			off = m.Offset
			err = each(OutputEvent{Offset: m.Offset, Lost: m.Lost, Done: m.Done, Exit: exitStatus(m.Exit)})
		case agentproto.RecordEnd:
			return nil
		default:
			err = fmt.Errorf("%w: unexpected record kind %d in a process's output", ErrUnavailable, rec.Kind)
		}
		if err != nil {
			return err
		}
	}
}

// procErr maps the agent's process errors onto the service's, and any
// other as every call does.
func (sb *Sandbox) procErr(err error) error {
	var ae *agentproto.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case agentproto.CodeNoProcess:
			return fmt.Errorf("%w: %s", ErrProcessNotFound, ae.Message)
		case agentproto.CodeState:
			return fmt.Errorf("%w: %s", ErrProcessState, ae.Message)
		}
	}
	return sb.fail(err)
}

func processInfo(p agentproto.ProcInfo) ProcessInfo {
	info := ProcessInfo{Pid: p.Pid, Tag: p.Tag, Args: p.Args, User: p.User, Cwd: p.Cwd, Running: p.Running,
		Exit: exitStatus(p.Exit), OutputSize: p.OutputSize, OutputLimit: p.OutputLimit, StdinOpen: p.StdinOpen, Cove: p.Cove}
	if info.User == "" && p.Cove {
		info.User = RootUser
	}
	if p.StartedUnixNano > 0 {
		info.StartedAt = time.Unix(0, p.StartedUnixNano)
	}
	return info
}

func exitStatus(e *agentproto.ProcExit) *ExitStatus {
	if e == nil {
		return nil
	}
	return &ExitStatus{ExitCode: e.ExitCode, Signal: e.Signal, TimedOut: e.TimedOut, Duration: time.Duration(e.DurationMs) * time.Millisecond}
}
