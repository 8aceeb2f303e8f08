package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// The data plane's requests and results are the service's own: callers
// need not know the guest protocol, which the service converts to and from.

// WorkDir is a sandbox's working directory: relative paths in file calls,
// and exec's default cwd, resolve against it.
const WorkDir = agentproto.WorkDir

// PingResult is an agent's answer to a ping.
type PingResult struct {
	Hostname string
	Uptime   time.Duration
	// RTT is the round trip as the service measured it.
	RTT time.Duration
}

// ExecRequest runs one command: Args (an argv looked up in PATH) or Shell
// (run by /bin/sh -c), not both.
type ExecRequest struct {
	Args  []string
	Shell string
	Cwd   string   // "": WorkDir
	Env   []string // KEY=VALUE, added to the default environment
	Stdin []byte   // nil: /dev/null
	// Timeout kills the command's whole process group when it elapses;
	// 0 means none.
	Timeout time.Duration
	User    string // "": the sandbox's default user
}

func (r ExecRequest) proto() agentproto.ExecRequest {
	return agentproto.ExecRequest{Args: r.Args, Shell: r.Shell, Cwd: r.Cwd, Env: r.Env, Stdin: r.Stdin, TimeoutMs: r.Timeout.Milliseconds(),
		User: r.User}
}

// ExecResult is how a command ended. ExitCode is -1 when it was killed by
// a signal (including the timeout).
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int
	TimedOut       bool
	Truncated      bool // output beyond the agent's cap was dropped
	Duration       time.Duration
}

// EvalRequest evaluates Python code in the sandbox's warm interpreter,
// whose globals persist between calls.
type EvalRequest struct {
	Code    string
	Timeout time.Duration
}

// EvalResult: Result is repr() of the value of a trailing expression (""
// when there is none); Error is the formatted exception; ExitCode is 0 on
// success, 1 when the code raised.
type EvalResult struct {
	Result, Stdout, Stderr, Error string
	ExitCode                      int
}

// FileInfo describes one file in a sandbox.
type FileInfo struct {
	Path    string
	Type    string // "file", "dir", "symlink", "other"
	Size    int64
	Mode    uint32 // permission bits, as chmod takes them
	ModTime time.Time
	Target  string // a symlink's target
	SHA256  string // hex digest of what a Put wrote; "" elsewhere
}

func fileInfo(i agentproto.FileInfo) FileInfo {
	return FileInfo{Path: i.Path, Type: i.Type, Size: i.Size, Mode: i.Mode, ModTime: time.Unix(i.MtimeUnix, 0), Target: i.Target, SHA256: i.SHA256}
}

// PutRequest writes a file, atomically: readers see the old file or the
// whole new one.
type PutRequest struct {
	Path string
	Mode uint32 // permission bits; 0 means 0644
	User string // owner; "": the sandbox's default user
}

// GetRequest reads a file, or the part of it from Offset, at most Length
// bytes (0: to the end).
type GetRequest struct {
	Path           string
	Offset, Length int64
}

func (r GetRequest) proto() agentproto.GetRequest {
	return agentproto.GetRequest{Path: r.Path, Offset: r.Offset, Length: r.Length}
}

// Span returns how many bytes r reads from a file of size bytes.
func (r GetRequest) Span(size int64) int64 { return r.proto().Span(size) }

// ListRequest lists a directory tree. Depth 1 lists the direct children.
type ListRequest struct {
	Path  string
	Depth int // 0 means 1
}

// ListResult is a directory tree in lexical order, cut short (Truncated)
// past the agent's cap.
type ListResult struct {
	Entries   []FileInfo
	Truncated bool
}

// WaitRequest waits until the file at Path contains Text, or Timeout (0:
// the agent's default) elapses.
type WaitRequest struct {
	Path, Text string
	Timeout    time.Duration
}

// WaitResult reports whether the text appeared, and when.
type WaitResult struct {
	Found   bool
	Elapsed time.Duration
}

// Sandbox is a handle for data-plane calls, obtained with the sandbox's
// token: holding one is proof the caller may use the sandbox.
type Sandbox struct {
	s *Service
	b *box
}

// Open checks a sandbox's token and returns a handle for data-plane calls.
func (s *Service) Open(ctx context.Context, id, token string) (*Sandbox, error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("%w: sandbox %s needs its token", ErrNoToken, id)
	}
	if !tokenMatches(b.rec.TokenHash, token) {
		return nil, fmt.Errorf("%w: wrong token for sandbox %s", ErrForbidden, id)
	}
	if err := b.usable(); err != nil {
		return nil, err
	}
	return &Sandbox{s: s, b: b}, nil
}

// ID returns the sandbox's id.
func (sb *Sandbox) ID() string { return sb.b.rec.ID }

// Ping checks that the agent answers and measures its round trip.
func (sb *Sandbox) Ping(ctx context.Context) (PingResult, error) {
	a, err := sb.agent(ctx)
	if err != nil {
		return PingResult{}, err
	}
	t0 := time.Now()
	r, err := a.Ping(ctx)
	return PingResult{Hostname: r.Hostname, Uptime: time.Duration(r.UptimeMs) * time.Millisecond, RTT: time.Since(t0)}, sb.fail(err)
}

// Exec runs a command.
func (sb *Sandbox) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	a, preq, err := sb.execStart(ctx, req)
	if err != nil {
		return ExecResult{}, err
	}
	r, err := a.Exec(ctx, preq)
	return ExecResult{Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode, TimedOut: r.TimedOut, Truncated: r.Truncated,
		Duration: time.Duration(r.DurationMs) * time.Millisecond}, sb.fail(err)
}

// Eval evaluates Python code in the sandbox's warm interpreter.
func (sb *Sandbox) Eval(ctx context.Context, req EvalRequest) (EvalResult, error) {
	if req.Code == "" {
		return EvalResult{}, invalidf("code is empty")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return EvalResult{}, err
	}
	r, err := a.Eval(ctx, agentproto.EvalRequest{Code: req.Code, TimeoutMs: req.Timeout.Milliseconds()})
	return EvalResult{Result: r.Result, Stdout: r.Stdout, Stderr: r.Stderr, Error: r.Error, ExitCode: r.ExitCode}, sb.fail(err)
}

// Put writes a file from r, atomically.
func (sb *Sandbox) Put(ctx context.Context, req PutRequest, r io.Reader) (FileInfo, error) {
	if err := checkPathMode(req.Path, req.Mode); err != nil {
		return FileInfo{}, err
	}
	if err := agentproto.CheckUser(req.User); err != nil {
		return FileInfo{}, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return FileInfo{}, err
	}
	info, err := a.Put(ctx, agentproto.PutRequest{Path: req.Path, Mode: req.Mode, User: sb.b.userOr(req.User)}, r)
	if err != nil {
		return FileInfo{}, sb.fail(err)
	}
	return fileInfo(info), nil
}

// Get opens a file, or a range of it, for reading; the caller closes the
// reader. A range yields at most req.Span(info.Size) bytes, fewer if the
// file shrank; a whole file is read to its end, whatever its size when
// opened (info.Size; procfs says 0).
func (sb *Sandbox) Get(ctx context.Context, req GetRequest) (FileInfo, io.ReadCloser, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return FileInfo{}, nil, mapErr(err)
	}
	if req.Offset < 0 || req.Length < 0 {
		return FileInfo{}, nil, invalidf("offset and length must not be negative")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return FileInfo{}, nil, err
	}
	info, rc, err := a.Get(ctx, req.proto())
	if err != nil {
		return FileInfo{}, nil, sb.fail(err)
	}
	return fileInfo(info), rc, nil
}

// List lists a directory tree.
func (sb *Sandbox) List(ctx context.Context, req ListRequest) (ListResult, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return ListResult{}, mapErr(err)
	}
	if req.Depth < 0 || req.Depth > 64 {
		return ListResult{}, invalidf("depth must be between 1 and 64")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return ListResult{}, err
	}
	r, err := a.List(ctx, agentproto.ListRequest{Path: req.Path, Depth: req.Depth})
	if err != nil {
		return ListResult{}, sb.fail(err)
	}
	out := ListResult{Entries: make([]FileInfo, len(r.Entries)), Truncated: r.Truncated}
	for i, e := range r.Entries {
		out.Entries[i] = fileInfo(e)
	}
	return out, nil
}

// Wait blocks until a file contains a text or the timeout elapses.
func (sb *Sandbox) Wait(ctx context.Context, req WaitRequest) (WaitResult, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return WaitResult{}, mapErr(err)
	}
	if req.Text == "" {
		return WaitResult{}, invalidf("text is empty")
	}
	if req.Timeout < 0 {
		return WaitResult{}, invalidf("timeout must not be negative")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return WaitResult{}, err
	}
	r, err := a.Wait(ctx, agentproto.WaitRequest{Path: req.Path, Text: req.Text, TimeoutMs: req.Timeout.Milliseconds()})
	return WaitResult{Found: r.Found, Elapsed: time.Duration(r.ElapsedMs) * time.Millisecond}, sb.fail(err)
}
