package apitype

import "time"

// Statuses of a process.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// ProcessInfo describes a process in a sandbox: a background process cove
// started (Cove), or, in a list with all=true, another of the sandbox's.
type ProcessInfo struct {
	Pid    int      `json:"pid"`
	Tag    string   `json:"tag,omitempty"`
	Cmd    []string `json:"cmd"`
	User   string   `json:"user,omitempty"`
	Cwd    string   `json:"cwd,omitempty"`
	Status string   `json:"status"` // ProcessRunning or ProcessExited
	// Exit is how it ended, once it has.
	Exit      *ExitStatus `json:"exit,omitempty"`
	StartedAt *time.Time  `json:"started_at,omitempty"`
	// OutputSize counts every byte of output it wrote, stdout and stderr
	// together; the last OutputLimit of them are kept.
	OutputSize  int64 `json:"output_size"`
	OutputLimit int64 `json:"output_limit,omitempty"`
	StdinOpen   bool  `json:"stdin_open"`
	Cove        bool  `json:"cove"`
}

// ProcessList is the answer of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// ProcessOutput is the answer of GET .../processes/{pid}/output as one
// JSON document: the chunks from Offset on, where the next read starts,
// how many bytes before Offset the ring no longer held, and Exit once the
// process ended and nothing is left to read.
type ProcessOutput struct {
	Chunks     []OutputEvent `json:"chunks"`
	Offset     int64         `json:"offset"`
	NextOffset int64         `json:"next_offset"`
	Lost       int64         `json:"lost,omitempty"`
	Exit       *ExitStatus   `json:"exit,omitempty"`
}

// SignalRequest is the body of POST .../processes/{pid}/signal: a name
// ("TERM", "SIGKILL") or a number; "" is TERM.
type SignalRequest struct {
	Signal string `json:"signal,omitempty"`
}

// StdinResponse answers POST .../processes/{pid}/stdin.
type StdinResponse struct {
	Written int64 `json:"written"`
	Closed  bool  `json:"closed,omitempty"`
}
