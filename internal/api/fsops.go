package api

import (
	"fmt"
	"net/http"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fsRoutes registers the file system calls beside put, get and list.
func (s *Server) fsRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /v1/sandboxes/{id}/stat", s.data(s.stat))
	m.HandleFunc("POST /v1/sandboxes/{id}/mkdir", s.data(s.mkdir))
	m.HandleFunc("POST /v1/sandboxes/{id}/move", s.data(s.move))
	m.HandleFunc("DELETE /v1/sandboxes/{id}/files", s.data(s.removeFile))
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	info, err := sb.Stat(r.Context(), r.URL.Query().Get("path"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(info))
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.MkdirRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	mode, err := apitype.ParseMode(req.Mode)
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: %v", sandbox.ErrInvalid, err))
		return
	}
	info, err := sb.Mkdir(r.Context(), sandbox.MkdirRequest{Path: req.Path, Mode: mode})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(info))
}

func (s *Server) move(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.MoveRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := sb.Move(r.Context(), sandbox.MoveRequest{From: req.From, To: req.To, Overwrite: req.Overwrite})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(info))
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	q := r.URL.Query()
	recursive, err := boolParam(q, "recursive")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := sb.Remove(r.Context(), sandbox.RemoveRequest{Path: q.Get("path"), Recursive: recursive}); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
