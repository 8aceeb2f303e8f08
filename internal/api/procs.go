package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// procRoutes registers the background process calls; a process starts
// with POST /v1/sandboxes/{id}/exec and "background": true.
func (s *Server) procRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /v1/sandboxes/{id}/processes", s.data(s.listProcesses))
	m.HandleFunc("GET /v1/sandboxes/{id}/processes/{pid}", s.data(s.getProcess))
	m.HandleFunc("DELETE /v1/sandboxes/{id}/processes/{pid}", s.data(s.removeProcess))
	m.HandleFunc("GET /v1/sandboxes/{id}/processes/{pid}/output", s.data(s.processOutput))
	m.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/stdin", s.data(s.processStdin))
	m.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/signal", s.data(s.signalProcess))
}

// startProcess answers an exec with "background": true: 201 and the
// process, which runs on after the call.
func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox, req sandbox.ExecRequest, body apitype.ExecRequest) {
	if req.Stdin != nil {
		s.fail(w, r, fmt.Errorf("%w: a background process takes no stdin in the request: write it with POST /v1/sandboxes/{id}/processes/{pid}/stdin", sandbox.ErrInvalid))
		return
	}
	p, err := sb.StartProcess(r.Context(), sandbox.ProcessRequest{Args: req.Args, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env,
		Timeout: req.Timeout, User: req.User, Tag: body.Tag, OutputLimit: body.OutputLimit})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, processInfo(p))
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	all, err := queryBool(r, "all")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	procs, err := sb.Processes(r.Context(), all)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apitype.ProcessList{Processes: make([]apitype.ProcessInfo, len(procs))}
	for i, p := range procs {
		out.Processes[i] = processInfo(p)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	ref, err := sandbox.ParseProcessRef(r.PathValue("pid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := sb.Process(r.Context(), ref)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, processInfo(p))
}

func (s *Server) removeProcess(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	ref, err := sandbox.ParseProcessRef(r.PathValue("pid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := sb.RemoveProcess(r.Context(), ref); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// processOutput reads a process's output from ?offset= (at most ?limit=
// bytes) as one JSON document, or, with follow=true or an Accept of NDJSON
// or SSE, streams it as OutputEvents as it is produced, the last carrying
// the exit status.
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	ref, err := sandbox.ParseProcessRef(r.PathValue("pid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	offset, err := queryInt(r, "offset")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !follow && q.Get("follow") == "" && wantsStream(r) {
		follow = true
	}
	if !follow && !wantsStream(r) {
		s.pollOutput(w, r, sb, ref, offset, limit)
		return
	}
	s.streamOutput(w, r, sb, ref, offset, limit, follow)
}

func (s *Server) pollOutput(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox, ref sandbox.ProcessRef, offset, limit int64) {
	read, err := sb.ProcessOutput(r.Context(), ref, offset, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apitype.ProcessOutput{Chunks: make([]apitype.OutputEvent, len(read.Chunks)), Offset: read.Offset,
		NextOffset: read.NextOffset, Lost: read.Lost, Exit: exitStatus(read.Exit)}
	for i, c := range read.Chunks {
		out.Chunks[i] = outputEvent(c)
	}
	writeJSON(w, http.StatusOK, out)
}

// streamOutput streams OutputEvents: chunks, gaps (Lost), and a last
// record with where the next read starts and, once the process ended, its
// exit. An error after the first record is a last record with Error.
func (s *Server) streamOutput(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox, ref sandbox.ProcessRef, offset, limit int64, follow bool) {
	es := newEventStream(w, r)
	each := func(ev sandbox.OutputEvent) error { return es.send(outputEvent(ev)) }
	var err error
	if follow {
		err = sb.FollowOutput(r.Context(), ref, offset, each)
	} else {
		err = sb.StreamOutput(r.Context(), ref, offset, limit, each)
	}
	switch {
	case err == nil || es.err != nil:
	case !es.started:
		s.fail(w, r, err)
	default:
		status, code := errStatus(err)
		s.logFailure(r, status, err)
		es.send(apitype.OutputEvent{Error: &apitype.ErrorBody{Error: err.Error(), Code: code}})
	}
}

// processStdin copies the request's body, as it arrives, to the process's
// stdin; ?close=true closes stdin after it.
func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	ref, err := sandbox.ParseProcessRef(r.PathValue("pid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	closeAfter, err := queryBool(r, "close")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := sb.WriteStdin(r.Context(), ref, r.Body, closeAfter)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.StdinResponse{Written: n, Closed: closeAfter})
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	ref, err := sandbox.ParseProcessRef(r.PathValue("pid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req apitype.SignalRequest
	if err := decode(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Signal == "" {
		req.Signal = "TERM"
	}
	p, err := sb.Signal(r.Context(), ref, req.Signal)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, processInfo(p))
}

// queryBool reads a true/false query parameter; absent is false.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%.40q: want true or false", sandbox.ErrInvalid, name, v)
	}
	return b, nil
}

// queryInt reads a non-negative integer query parameter; absent is 0.
func queryInt(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s=%.40q: want a number of bytes, 0 or more", sandbox.ErrInvalid, name, v)
	}
	return n, nil
}

func processInfo(p sandbox.ProcessInfo) apitype.ProcessInfo {
	out := apitype.ProcessInfo{Pid: p.Pid, Tag: p.Tag, Cmd: p.Args, User: p.User, Cwd: p.Cwd, Status: apitype.ProcessRunning,
		Exit: exitStatus(p.Exit), OutputSize: p.OutputSize, OutputLimit: p.OutputLimit, StdinOpen: p.StdinOpen, Cove: p.Cove}
	if !p.Running {
		out.Status = apitype.ProcessExited
	}
	if !p.StartedAt.IsZero() {
		t := p.StartedAt.UTC().Truncate(time.Millisecond)
		out.StartedAt = &t
	}
	return out
}

func exitStatus(e *sandbox.ExitStatus) *apitype.ExitStatus {
	if e == nil {
		return nil
	}
	return &apitype.ExitStatus{ExitCode: e.ExitCode, Signal: e.Signal, TimedOut: e.TimedOut, DurationMs: e.Duration.Milliseconds()}
}

func outputEvent(ev sandbox.OutputEvent) apitype.OutputEvent {
	out := apitype.OutputEvent{Stream: ev.Stream, Offset: ev.Offset, Lost: ev.Lost, Exit: exitStatus(ev.Exit)}
	if len(ev.Data) > 0 {
		out.SetBytes(ev.Data)
	}
	return out
}
