package apitype

import "unicode/utf8"

// ContentTypeSSE is server-sent events: streaming answers (a process's
// output, a watch) use it instead of NDJSON when the request accepts it,
// each event's data one of the records NDJSON would carry on a line.
const ContentTypeSSE = "text/event-stream"

// OutputEvent is one record of a streamed exec or of a process's output:
// a chunk of output, or the last record, which carries how the command
// ended (Exit) or the error that cut the stream short (Error).
type OutputEvent struct {
	Stream string `json:"stream,omitempty"` // "stdout" or "stderr"
	// Offset is where the chunk starts in the process's output (stdout and
	// stderr counted together, in the order produced); 0 for a streamed exec.
	Offset int64 `json:"offset,omitempty"`
	// Data is the chunk when it is valid UTF-8; DataB64 (standard base64)
	// when it is not. One of them is set on a chunk.
	Data    string `json:"data,omitempty"`
	DataB64 []byte `json:"data_b64,omitempty"`
	// Lost counts output dropped from the process's ring before this
	// record, which a slow reader no longer gets.
	Lost  int64       `json:"lost,omitempty"`
	Exit  *ExitStatus `json:"exit,omitempty"`
	Error *ErrorBody  `json:"error,omitempty"`
}

// Bytes returns the chunk's bytes, from Data or DataB64.
func (e OutputEvent) Bytes() []byte {
	if e.DataB64 != nil {
		return e.DataB64
	}
	return []byte(e.Data)
}

// SetBytes sets the chunk, as Data when it is valid UTF-8.
func (e *OutputEvent) SetBytes(p []byte) {
	if utf8.Valid(p) {
		e.Data, e.DataB64 = string(p), nil
		return
	}
	e.Data, e.DataB64 = "", append([]byte(nil), p...)
}

// ExitStatus is how a command or process ended.
type ExitStatus struct {
	ExitCode int `json:"exit_code"` // -1 when a signal ended it
	// Signal names the signal that ended it ("SIGTERM"), if one did.
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationMs int64  `json:"duration_ms"`
}
