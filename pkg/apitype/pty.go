package apitype

// A terminal (GET /v1/sandboxes/{id}/pty) is a WebSocket: binary messages
// carry the terminal's bytes both ways, text messages carry one of the
// JSON messages below.

// Types of a terminal's text messages.
const (
	TerminalResize = "resize" // client: the terminal is now Cols by Rows
	TerminalSignal = "signal" // client: send Signal to the foreground process group
	TerminalExit   = "exit"   // server: the command ended; a normal close follows
	TerminalError  = "error"  // server: a control message was refused; the terminal lives on
)

// Default size of a terminal when the request names none.
const (
	DefaultTerminalCols = 80
	DefaultTerminalRows = 24
)

// TerminalControl is a client's text message: {"type":"resize","cols":120,
// "rows":40} or {"type":"signal","signal":"INT"}.
type TerminalControl struct {
	Type   string `json:"type"`
	Cols   int    `json:"cols,omitempty"`
	Rows   int    `json:"rows,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// TerminalEvent is a server's text message: the command's end
// ({"type":"exit","exit_code":0}; -1 and the signal's name when a signal
// ended it), or a refused control message ({"type":"error","error":...}).
type TerminalEvent struct {
	Type     string `json:"type"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`
}
