// Package agentproto is the protocol between the cove daemon and cove-agent,
// the process that runs inside every sandbox.
//
// Host and guest share one byte stream (a TCP connection into the sandbox's
// own network stack for gVisor, a virtio-serial port for VMs). It is
// multiplexed with yamux: the host opens one stream per call, so a slow
// upload never blocks a ping. On each stream the host writes a Header frame,
// then, for uploads, Data frames closed by an End frame. The agent answers
// with a Response frame, then, for downloads, Data frames and an End frame.
package agentproto

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Port is the TCP port the agent listens on inside a sandbox's network stack.
const Port = 7070

// SerialPort names the virtio-serial port a microVM's agent serves on
// instead of Port.
const SerialPort = "cove.agent"

// WorkDir is the sandbox's working directory: relative paths in file calls and
// the default cwd of exec resolve against it.
const WorkDir = "/work"

// Version is bumped whenever the wire format changes incompatibly.
const Version = 1

// Ops carried in Header.Op.
const (
	OpPing = "ping"
	OpExec = "exec"
	OpEval = "eval"
	OpPut  = "put"
	OpGet  = "get"
	OpList = "list"
	OpWait = "wait"
	// OpWarm starts the eval interpreter ahead of the first eval, so that a
	// snapshot carries it warm.
	OpWarm = "warm"
	// OpRestored tells the agent it now runs in a sandbox restored from a
	// snapshot: it takes the new identity and reseeds what clones would
	// otherwise share.
	OpRestored = "restored"
)

// Header opens every stream.
type Header struct {
	Op   string          `json:"op"`
	Body json.RawMessage `json:"body,omitempty"`
}

// Response is the agent's first frame on every stream.
type Response struct {
	Error *Error          `json:"error,omitempty"`
	Body  json.RawMessage `json:"body,omitempty"`
}

// Error codes: the daemon maps them onto HTTP statuses.
const (
	CodeInvalid  = "invalid"   // bad argument (400)
	CodeNotFound = "not_found" // path does not exist (404)
	CodeIsDir    = "is_dir"    // a file call named a directory (400)
	CodeTimeout  = "timeout"   // the call's own timeout elapsed (408/504)
	CodeTooLarge = "too_large" // a request over a size limit (413)
	CodeInternal = "internal"  // anything else (500)
)

// Error is an error reported by the agent.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the agent error code carried by err, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// PingResult answers OpPing.
type PingResult struct {
	Version      int    `json:"version"`
	Hostname     string `json:"hostname"`
	UptimeMs     int64  `json:"uptime_ms"`
	TimeUnixNano int64  `json:"time_unix_nano"`
}

// ExecRequest runs one command. Exactly one of Args and Shell is set.
type ExecRequest struct {
	Args  []string `json:"args,omitempty"`  // argv, looked up in PATH
	Shell string   `json:"shell,omitempty"` // run as /bin/sh -c Shell
	Cwd   string   `json:"cwd,omitempty"`   // default WorkDir
	Env   []string `json:"env,omitempty"`   // KEY=VALUE, added to the default environment
	Stdin []byte   `json:"stdin,omitempty"` // nil: /dev/null
	// TimeoutMs kills the command's whole process group when it elapses; 0 means none.
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	User      string `json:"user,omitempty"` // account to run as; "": root
}

// Limits of one exec, the same on both ends: what the daemon accepts, the
// agent can read and the guest kernel can run.
const (
	// MaxStdin caps an exec's stdin, which travels inside the request's
	// JSON frame. Larger input belongs in a file.
	MaxStdin = 48 << 20
	// MaxArg caps one argument, the shell command and one KEY=VALUE env
	// entry: Linux's MAX_ARG_STRLEN (32 pages) less the terminating NUL,
	// beyond which execve fails with E2BIG.
	MaxArg = 32*4096 - 1
	// MaxArgs caps the command line and env together, each string counted
	// with its NUL and pointer as execve counts them: half the 2 MiB
	// ARG_MAX that an 8 MiB stack limit gives.
	MaxArgs = 1 << 20
	// MaxCwd caps the working directory: PATH_MAX less the NUL.
	MaxCwd = 4095
)

// Validate reports whether r is well formed and within the limits above.
// Messages name the field but do not echo it: it may be huge.
func (r *ExecRequest) Validate() error {
	switch {
	case len(r.Args) == 0 && r.Shell == "":
		return Errorf(CodeInvalid, "exec needs args or a shell command")
	case len(r.Args) > 0 && r.Shell != "":
		return Errorf(CodeInvalid, "exec takes args or a shell command, not both")
	case r.TimeoutMs < 0:
		return Errorf(CodeInvalid, "timeout must not be negative")
	case len(r.Stdin) > MaxStdin:
		return Errorf(CodeTooLarge, "stdin is %d bytes, over the limit of %d: write the input to a file and redirect from it", len(r.Stdin), MaxStdin)
	}
	if err := checkString("cwd", r.Cwd, MaxCwd); err != nil {
		return err
	}
	if err := CheckUser(r.User); err != nil {
		return err
	}
	total := 0
	check := func(field, s string) error {
		total += len(s) + 1 + 8 // the NUL and the pointer
		return checkString(field, s, MaxArg)
	}
	for i, a := range r.Args {
		if err := check(fmt.Sprintf("args[%d]", i), a); err != nil {
			return err
		}
	}
	if r.Shell != "" {
		if err := check("shell", r.Shell); err != nil {
			return err
		}
	}
	for i, kv := range r.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return Errorf(CodeInvalid, "env[%d] is not KEY=VALUE", i)
		}
		if err := check(fmt.Sprintf("env %.64q", k), kv); err != nil {
			return err
		}
	}
	if total > MaxArgs {
		return Errorf(CodeInvalid, "args, shell and env take %d bytes together, over the limit of %d: pass large data as stdin or in a file", total, MaxArgs)
	}
	return nil
}

// checkString refuses a NUL byte, which no C string can hold, and a string
// over max bytes.
func checkString(field, s string, max int) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return Errorf(CodeInvalid, "%s contains a NUL byte", field)
	case len(s) > max:
		return Errorf(CodeInvalid, "%s is %d bytes, over the limit of %d: pass large data as stdin or in a file", field, len(s), max)
	}
	return nil
}

// MaxOutput caps each of stdout and stderr kept from one exec.
const MaxOutput = 16 << 20

// ExecResult is the outcome of an exec. ExitCode is -1 when the command was
// killed by a signal (including the timeout).
type ExecResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"` // output beyond MaxOutput was dropped
	DurationMs int64  `json:"duration_ms"`
}

// EvalRequest evaluates Python code in the sandbox's warm interpreter, whose
// globals persist between calls for the life of the sandbox.
type EvalRequest struct {
	Code      string `json:"code"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
}

// EvalResult: Result is repr() of the value of a trailing expression (empty
// when there is none); Error is the formatted exception; ExitCode is 0 on
// success, 1 when the code raised.
type EvalResult struct {
	Result   string `json:"result"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// PutRequest writes a file; its content follows as Data frames. The write is
// atomic: readers see the old file or the whole new one.
type PutRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"` // permission bits; 0 means 0644
	User string `json:"user,omitempty"` // owner of the file (and of directories made for it); "": root
}

// GetRequest reads a file, or the part of it from Offset, at most Length
// bytes (0: to the end); the content follows the Response as Data frames.
type GetRequest struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Length int64  `json:"length,omitempty"`
}

// Span returns how many bytes a GetRequest reads from a file of size bytes.
func (r GetRequest) Span(size int64) int64 {
	n := max(size-r.Offset, 0)
	if r.Length > 0 {
		n = min(n, r.Length)
	}
	return n
}

// FileInfo describes one file.
type FileInfo struct {
	Path      string `json:"path"`
	Type      string `json:"type"` // "file", "dir", "symlink", "other"
	Size      int64  `json:"size"`
	Mode      uint32 `json:"mode"` // permission bits
	MtimeUnix int64  `json:"mtime_unix"`
	Target    string `json:"target,omitempty"` // symlink target
	// SHA256 is the hex digest of the content a put wrote; other calls
	// leave it empty.
	SHA256 string `json:"sha256,omitempty"`
}

// ListRequest lists a directory tree. Depth 1 lists the direct children.
type ListRequest struct {
	Path  string `json:"path"`
	Depth int    `json:"depth,omitempty"` // 0 means 1
}

// MaxListEntries caps one listing.
const MaxListEntries = 10000

// ListResult is a directory tree in lexical order.
type ListResult struct {
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

// WaitRequest blocks until the file at Path contains Text, or TimeoutMs elapses.
type WaitRequest struct {
	Path      string `json:"path"`
	Text      string `json:"text"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"` // 0 means 30s
}

// WaitResult reports whether the text appeared.
type WaitResult struct {
	Found     bool  `json:"found"`
	ElapsedMs int64 `json:"elapsed_ms"`
}

// RestoredRequest carries a restored sandbox's new identity.
type RestoredRequest struct {
	SandboxID string `json:"sandbox_id"`
	// Seed, if set, is fresh entropy for the guest kernel's RNG: the clones
	// of a VM snapshot share its pool (gVisor reseeds on its own).
	Seed []byte `json:"seed,omitempty"`
	// TimeUnixNano, if set, is the host's time: a restored VM's clock is
	// as old as its snapshot.
	TimeUnixNano int64 `json:"time_unix_nano,omitempty"`
	// Hostname, if set, is the restored sandbox's hostname (a VM's kernel
	// keeps the snapshot's).
	Hostname string `json:"hostname,omitempty"`
}

// DefaultWaitTimeout applies when WaitRequest.TimeoutMs is 0.
const DefaultWaitTimeout = 30 * time.Second

// ResolvePath turns a path given by a caller into an absolute, clean path
// inside the sandbox. Relative paths resolve against WorkDir. Any ".."
// element is refused rather than resolved: a caller that writes one almost
// always means to escape somewhere, and refusing is easier to reason about.
func ResolvePath(p string) (string, error) {
	if p == "" {
		return "", Errorf(CodeInvalid, "path is empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", Errorf(CodeInvalid, "path contains a NUL byte")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", Errorf(CodeInvalid, "path %q contains '..': use a path inside the sandbox", p)
		}
	}
	if !path.IsAbs(p) {
		p = path.Join(WorkDir, p)
	}
	return path.Clean(p), nil
}
