package api

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// eventStream writes a streaming answer: one JSON record a line (NDJSON),
// or as server-sent events when the request accepts only those, each
// record flushed as it is sent. Nothing is written before the first send,
// so that a call failing before it has anything to stream answers with a
// plain error and its status.
type eventStream struct {
	w       http.ResponseWriter
	sse     bool
	started bool
	err     error // of a write to the client: the client is gone
}

func newEventStream(w http.ResponseWriter, r *http.Request) *eventStream {
	return &eventStream{w: w, sse: wantsSSE(r)}
}

// wantsSSE reports whether r asks for server-sent events over NDJSON.
func wantsSSE(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		switch mt {
		case apitype.ContentTypeSSE:
			return true
		case apitype.ContentTypeNDJSON:
			return false
		}
	}
	return false
}

// wantsStream reports whether r asks for a streamed answer (NDJSON or
// SSE) rather than one JSON document.
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		if mt == apitype.ContentTypeNDJSON || mt == apitype.ContentTypeSSE {
			return true
		}
	}
	return false
}

// send writes one record and flushes it. Its error is the client's: the
// caller stops streaming.
func (s *eventStream) send(v any) error {
	if s.err != nil {
		return s.err
	}
	if !s.started {
		s.started = true
		ct := apitype.ContentTypeNDJSON
		if s.sse {
			ct = apitype.ContentTypeSSE
			s.w.Header().Set("Cache-Control", "no-cache")
		}
		s.w.Header().Set("Content-Type", ct)
		s.w.Header().Set("X-Content-Type-Options", "nosniff")
		s.w.WriteHeader(http.StatusOK)
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if s.sse {
		line = append(append([]byte("data: "), line...), '\n', '\n')
	} else {
		line = append(line, '\n')
	}
	if _, err := s.w.Write(line); err != nil {
		s.err = err
		return err
	}
	if err := http.NewResponseController(s.w).Flush(); err != nil {
		s.err = err
	}
	return s.err
}
