package api

import (
	"net/http"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// execStream answers an exec that accepts a stream (NDJSON or SSE): one
// apitype.OutputEvent per chunk of output as the command produces it,
// with no cap, and a last one carrying the exit status, or the error that
// cut the stream short. A failure before the first record is a plain
// error status. A client that goes away ends the command.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox, req sandbox.ExecRequest) {
	es := newEventStream(w, r)
	st, err := sb.ExecStream(r.Context(), req, func(stream string, p []byte) error {
		ev := apitype.OutputEvent{Stream: stream}
		ev.SetBytes(p)
		return es.send(ev)
	})
	switch {
	case err == nil:
		es.send(apitype.OutputEvent{Exit: &apitype.ExitStatus{
			ExitCode: st.ExitCode, Signal: st.Signal, TimedOut: st.TimedOut, DurationMs: st.Duration.Milliseconds(),
		}})
	case !es.started:
		s.fail(w, r, err)
	case es.err == nil:
		status, code := errStatus(err)
		s.logFailure(r, status, err)
		es.send(apitype.OutputEvent{Error: &apitype.ErrorBody{Error: err.Error() + hint(err), Code: code}})
	}
}
