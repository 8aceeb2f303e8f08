package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/yamux"
)

// Ops of background processes.
const (
	OpProcStart  = "proc_start"
	OpProcList   = "proc_list"
	OpProcGet    = "proc_get"
	OpProcOutput = "proc_output" // streaming: the process's output from an offset
	OpProcStdin  = "proc_stdin"  // bidirectional: Data frames to the process's stdin
	OpProcSignal = "proc_signal"
	OpProcRemove = "proc_remove" // forget an exited process and its output
)

// Error codes of the process calls.
const (
	// CodeNoProcess reports a pid or tag that names no process the agent
	// keeps (404).
	CodeNoProcess = "no_process"
	// CodeState reports a call that the process's state refuses: a signal
	// to a process that has exited, stdin to a closed stdin, a tag that a
	// running process has (409).
	CodeState = "state"
)

// Bounds of a background process's output ring.
const (
	DefaultOutputLimit = 16 << 20
	MinOutputLimit     = 4 << 10
	MaxOutputLimit     = 256 << 20
	// MaxTag bounds a process's tag.
	MaxTag = 128
)

// ProcStartRequest starts a background process. Stdin of the embedded
// request must be empty: a background process's stdin is a pipe written
// with OpProcStdin.
type ProcStartRequest struct {
	ExecRequest
	Tag string `json:"tag,omitempty"`
	// OutputLimit is the size of the process's output ring; 0 means
	// DefaultOutputLimit.
	OutputLimit int64 `json:"output_limit,omitempty"`
}

// Validate checks r as ExecRequest.Validate does, and its own fields.
func (r *ProcStartRequest) Validate() error {
	if err := r.ExecRequest.Validate(); err != nil {
		return err
	}
	switch {
	case r.Stdin != nil:
		return Errorf(CodeInvalid, "a background process takes no stdin up front: write it with the stdin call")
	case r.OutputLimit != 0 && (r.OutputLimit < MinOutputLimit || r.OutputLimit > MaxOutputLimit):
		return Errorf(CodeInvalid, "output_limit %d is not between %d and %d bytes", r.OutputLimit, MinOutputLimit, MaxOutputLimit)
	}
	return CheckTag(r.Tag)
}

// CheckTag checks a process tag: printable, at most MaxTag bytes, and not
// a number, so that a reference to a process is a pid or a tag, never
// both.
func CheckTag(tag string) error {
	if tag == "" {
		return nil
	}
	if len(tag) > MaxTag {
		return Errorf(CodeInvalid, "tag is %d bytes, over the limit of %d", len(tag), MaxTag)
	}
	digits := true
	for _, c := range tag {
		if c < 0x21 || c == 0x7f || c == '/' {
			return Errorf(CodeInvalid, "tag %.40q has %q: a tag is printable, without spaces or '/'", tag, c)
		}
		digits = digits && c >= '0' && c <= '9'
	}
	if digits {
		return Errorf(CodeInvalid, "tag %q is a number: a tag must not look like a pid", tag)
	}
	return nil
}

// ProcRef names a process by Pid or by Tag (the running process with it,
// else the last one that had it).
type ProcRef struct {
	Pid int    `json:"pid,omitempty"`
	Tag string `json:"tag,omitempty"`
}

func (r ProcRef) String() string {
	if r.Tag != "" {
		return "tag " + r.Tag
	}
	return fmt.Sprintf("pid %d", r.Pid)
}

// ProcExit is how a background process ended.
type ProcExit struct {
	ExitCode   int    `json:"exit_code"`        // -1 when a signal ended it
	Signal     string `json:"signal,omitempty"` // "SIGTERM"
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationMs int64  `json:"duration_ms"`
}

// ProcInfo describes a process: one the agent started (Cove), or, in a
// list with All, another one of the sandbox's.
type ProcInfo struct {
	Pid             int       `json:"pid"`
	Tag             string    `json:"tag,omitempty"`
	Args            []string  `json:"args"`
	User            string    `json:"user,omitempty"`
	Cwd             string    `json:"cwd,omitempty"`
	Running         bool      `json:"running"`
	Exit            *ProcExit `json:"exit,omitempty"`
	StartedUnixNano int64     `json:"started_unix_nano,omitempty"`
	// OutputSize counts every byte of output the process produced; the
	// ring keeps the last OutputLimit of them.
	OutputSize  int64 `json:"output_size"`
	OutputLimit int64 `json:"output_limit,omitempty"`
	StdinOpen   bool  `json:"stdin_open,omitempty"`
	Cove        bool  `json:"cove"`
}

// ProcListRequest lists the agent's processes; with All, the sandbox's
// others too.
type ProcListRequest struct {
	All bool `json:"all,omitempty"`
}

// ProcListResult lists processes: the agent's in start order, then others.
type ProcListResult struct {
	Procs []ProcInfo `json:"procs"`
}

// ProcOutputRequest reads a process's output from Offset (stdout and
// stderr counted together), at most Limit bytes (0: all there is), or,
// with Follow, on as it is produced until the process ends.
type ProcOutputRequest struct {
	ProcRef
	Offset int64 `json:"offset,omitempty"`
	Limit  int64 `json:"limit,omitempty"`
	Follow bool  `json:"follow,omitempty"`
}

// ProcMark is a JSON record of OpProcOutput: the Chunk records after it
// start at Offset, and Lost bytes before Offset are gone from the ring.
// The last record before End has Done set: Offset is then where the next
// read starts, and Exit is set when the process ended and its output has
// all been sent.
type ProcMark struct {
	Offset int64     `json:"offset"`
	Lost   int64     `json:"lost,omitempty"`
	Done   bool      `json:"done,omitempty"`
	Exit   *ProcExit `json:"exit,omitempty"`
}

// ProcStdinRequest writes the Data frames that follow to the process's
// stdin; with Close, it closes stdin after them.
type ProcStdinRequest struct {
	ProcRef
	Close bool `json:"close,omitempty"`
}

// ProcStdinResult is the last record of OpProcStdin.
type ProcStdinResult struct {
	Written int64 `json:"written"`
	Closed  bool  `json:"closed,omitempty"`
}

// ProcSignalRequest sends Signal ("TERM", "SIGKILL", "9") to the
// process's group.
type ProcSignalRequest struct {
	ProcRef
	Signal string `json:"signal"`
}

// ProcHandler carries out the process calls on the guest side.
type ProcHandler interface {
	ProcStart(ctx context.Context, req ProcStartRequest) (ProcInfo, error)
	ProcList(ctx context.Context, req ProcListRequest) (ProcListResult, error)
	ProcGet(ctx context.Context, req ProcRef) (ProcInfo, error)
	ProcSignal(ctx context.Context, req ProcSignalRequest) (ProcInfo, error)
	// ProcRemove forgets an exited process, its status and its output.
	ProcRemove(ctx context.Context, req ProcRef) error
	// ProcOutput checks req and returns the Response's mark and a function
	// that sends the records; it is called only if the Response was sent.
	ProcOutput(ctx context.Context, req ProcOutputRequest) (ProcMark, func(w io.Writer) error, error)
	// ProcStdin checks req, then, once the Response is sent, copies the
	// host's Data frames from r to the process's stdin.
	ProcStdin(ctx context.Context, req ProcStdinRequest) (func(r io.Reader) (ProcStdinResult, error), error)
}

// procServer serves the process ops.
func procServer(h ProcHandler) StreamServer {
	return func(ctx context.Context, st *yamux.Stream, op string, decode func(any) error) bool {
		switch op {
		case OpProcStart, OpProcList, OpProcGet, OpProcSignal, OpProcRemove:
			out, err := serveProcCall(ctx, h, op, decode)
			writeResponse(st, out, err)
		case OpProcOutput:
			serveProcOutput(ctx, st, h, decode)
		case OpProcStdin:
			serveProcStdin(ctx, st, h, decode)
		default:
			return false
		}
		return true
	}
}

func serveProcCall(ctx context.Context, h ProcHandler, op string, decode func(any) error) (any, error) {
	switch op {
	case OpProcStart:
		var req ProcStartRequest
		if err := decode(&req); err != nil {
			return nil, err
		}
		return h.ProcStart(ctx, req)
	case OpProcList:
		var req ProcListRequest
		if err := decode(&req); err != nil {
			return nil, err
		}
		return h.ProcList(ctx, req)
	case OpProcGet, OpProcRemove:
		var req ProcRef
		if err := decode(&req); err != nil {
			return nil, err
		}
		if op == OpProcRemove {
			return struct{}{}, h.ProcRemove(ctx, req)
		}
		return h.ProcGet(ctx, req)
	default:
		var req ProcSignalRequest
		if err := decode(&req); err != nil {
			return nil, err
		}
		return h.ProcSignal(ctx, req)
	}
}

func serveProcOutput(ctx context.Context, st *yamux.Stream, h ProcHandler, decode func(any) error) {
	var req ProcOutputRequest
	if err := decode(&req); err != nil {
		writeResponse(st, nil, err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mark, send, err := h.ProcOutput(ctx, req)
	if err != nil {
		writeResponse(st, nil, err)
		return
	}
	if writeResponse(st, mark, nil) != nil {
		return
	}
	// The host closes the stream to stop a follow: a read that fails is
	// the cancel, and ends the records' wait for more output.
	discard := func([]byte) error { return nil }
	go func() {
		ReadHostFrames(st, discard, discard)
		cancel()
	}()
	if send(st) == nil {
		WriteEnd(st)
	}
}

func serveProcStdin(ctx context.Context, st *yamux.Stream, h ProcHandler, decode func(any) error) {
	var req ProcStdinRequest
	if err := decode(&req); err != nil {
		writeResponse(st, nil, err)
		return
	}
	copyIn, err := h.ProcStdin(ctx, req)
	if err != nil {
		writeResponse(st, nil, err)
		return
	}
	if writeResponse(st, struct{}{}, nil) != nil {
		return
	}
	res, err := copyIn(NewDataReader(st))
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: CodeInternal, Message: err.Error()}
		}
		WriteJSON(st, struct {
			Error *Error `json:"error"`
		}{e})
		return
	}
	if WriteJSON(st, res) == nil {
		WriteEnd(st)
	}
}

// ProcStart starts a background process.
func (c *Client) ProcStart(ctx context.Context, req ProcStartRequest) (ProcInfo, error) {
	var r ProcInfo
	err := c.do(ctx, OpProcStart, req, &r)
	return r, err
}

// ProcList lists processes.
func (c *Client) ProcList(ctx context.Context, req ProcListRequest) (ProcListResult, error) {
	var r ProcListResult
	err := c.do(ctx, OpProcList, req, &r)
	return r, err
}

// ProcGet describes one of the agent's processes.
func (c *Client) ProcGet(ctx context.Context, ref ProcRef) (ProcInfo, error) {
	var r ProcInfo
	err := c.do(ctx, OpProcGet, ref, &r)
	return r, err
}

// ProcSignal sends a signal to a process's group.
func (c *Client) ProcSignal(ctx context.Context, req ProcSignalRequest) (ProcInfo, error) {
	var r ProcInfo
	err := c.do(ctx, OpProcSignal, req, &r)
	return r, err
}

// ProcRemove forgets an exited process.
func (c *Client) ProcRemove(ctx context.Context, ref ProcRef) error {
	return c.do(ctx, OpProcRemove, ref, nil)
}

// ProcOutput opens a read of a process's output: the mark says where it
// starts; the stream's records are Chunks, ProcMarks (a gap, the last one
// Done) and End. The caller closes the stream.
func (c *Client) ProcOutput(ctx context.Context, req ProcOutputRequest) (*Stream, ProcMark, error) {
	var mark ProcMark
	st, err := c.OpenStream(ctx, OpProcOutput, req, &mark)
	return st, mark, err
}

// ProcStdin copies r to a process's stdin, and closes it after if
// req.Close.
func (c *Client) ProcStdin(ctx context.Context, req ProcStdinRequest, r io.Reader) (ProcStdinResult, error) {
	var res ProcStdinResult
	st, err := c.OpenStream(ctx, OpProcStdin, req, nil)
	if err != nil {
		return res, err
	}
	defer st.Close()
	dw := NewDataWriter(st.Writer())
	if _, err := io.Copy(dw, r); err != nil {
		return res, c.ctxErr(ctx, fmt.Errorf("agentproto: send stdin: %w", err))
	}
	if err := dw.Close(); err != nil {
		return res, c.ctxErr(ctx, fmt.Errorf("agentproto: send stdin: %w", err))
	}
	rec, err := st.Next()
	if err != nil {
		return res, c.ctxErr(ctx, fmt.Errorf("agentproto: read the stdin result: %w", err))
	}
	var out struct {
		ProcStdinResult
		Error *Error `json:"error"`
	}
	if err := rec.Decode(&out); err != nil {
		return res, err
	}
	if out.Error != nil {
		return out.ProcStdinResult, out.Error
	}
	return out.ProcStdinResult, nil
}
