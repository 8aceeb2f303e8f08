package api

import (
	"net/http"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// pauseRoutes: pause and resume are the sandbox's lifecycle, like extend
// and delete (the API key); a checkpoint copies its state and a rollback
// replaces it, so they take its token, as branch does.
func (s *Server) pauseRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /v1/sandboxes/{id}/pause", s.auth(s.pause))
	m.HandleFunc("POST /v1/sandboxes/{id}/resume", s.auth(s.resume))
	m.HandleFunc("POST /v1/sandboxes/{id}/checkpoints", s.data(s.checkpoint))
	m.HandleFunc("GET /v1/sandboxes/{id}/checkpoints", s.data(s.listCheckpoints))
	m.HandleFunc("POST /v1/sandboxes/{id}/rollback", s.data(s.rollback))
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decode(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := s.svc.Pause(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxInfo(info))
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	var req apitype.ResumeRequest
	if err := decode(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := s.svc.Resume(r.Context(), r.PathValue("id"), ttl(req.TTLSecs))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxInfo(info))
}

func checkpointInfo(c sandbox.CheckpointInfo) apitype.CheckpointInfo {
	return apitype.CheckpointInfo{Name: c.Name, SizeBytes: c.SizeBytes, CreatedAtUnix: c.CreatedAt.Unix(), PauseMs: c.Pause.Milliseconds()}
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.CheckpointRequest
	if err := decode(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	c, err := sb.Checkpoint(r.Context(), req.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, checkpointInfo(c))
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	cs := sb.Checkpoints()
	out := apitype.CheckpointsResponse{Checkpoints: make([]apitype.CheckpointInfo, len(cs))}
	for i, c := range cs {
		out.Checkpoints[i] = checkpointInfo(c)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.RollbackRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := sb.Rollback(r.Context(), req.Checkpoint)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxInfo(info))
}
