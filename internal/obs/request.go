package obs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
)

// RequestIDHeader carries a request's id, both ways.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds an incoming id: it lands in logs and audit lines.
const maxRequestID = 128

// Request is what the daemon learns of one API request as it is served:
// its id, and what handlers note for the metrics and the audit log.
type Request struct {
	ID string
	// Code is the error code the answer carried, if any.
	Code string
	// SandboxID is the sandbox the request was about, when its route
	// does not name it (a create).
	SandboxID string
	// Op overrides the operation the route's latency counts for (a
	// create of several sandboxes is a spawn).
	Op string
}

type requestKey struct{}

// WithRequest returns ctx carrying req.
func WithRequest(ctx context.Context, req *Request) context.Context {
	return context.WithValue(ctx, requestKey{}, req)
}

// FromContext is the request ctx carries, or nil.
func FromContext(ctx context.Context) *Request {
	req, _ := ctx.Value(requestKey{}).(*Request)
	return req
}

// RequestID is the id of the request ctx carries, or "".
func RequestID(ctx context.Context) string {
	if req := FromContext(ctx); req != nil {
		return req.ID
	}
	return ""
}

// NewRequestID is incoming when it is sane (1 to 128 characters of
// letters, digits and -_.:), else a fresh random id.
func NewRequestID(incoming string) string {
	if saneID(incoming) {
		return incoming
	}
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func saneID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':'
		if !ok {
			return false
		}
	}
	return true
}

// LogHandler adds the request id of a record's context to every record
// logged with one (slog's ...Context calls), so each line of a request
// names it.
type LogHandler struct{ slog.Handler }

// NewLogHandler wraps h.
func NewLogHandler(h slog.Handler) *LogHandler { return &LogHandler{h} }

// Handle implements slog.Handler.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &LogHandler{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{h.Handler.WithGroup(name)}
}
