package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// treeRoutes registers a directory's tar upload and download and its watch.
func (s *Server) treeRoutes(m *http.ServeMux) {
	m.HandleFunc("PUT /v1/sandboxes/{id}/tar", s.data(s.putTar))
	m.HandleFunc("GET /v1/sandboxes/{id}/tar", s.data(s.getTar))
	m.HandleFunc("GET /v1/sandboxes/{id}/watch", s.data(s.watch))
}

// putTar extracts the request's body, a tar stream, into ?path, streamed
// through to the agent.
func (s *Server) putTar(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	q := r.URL.Query()
	res, err := sb.PutTar(r.Context(), sandbox.TarPutRequest{Path: q.Get("path"), User: q.Get("user")}, r.Body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.TarResult{Path: q.Get("path"), Files: res.Files, Dirs: res.Dirs, Symlinks: res.Symlinks,
		Links: res.Links, Skipped: res.Skipped, Bytes: res.Bytes})
}

// getTar streams the tree under ?path as a tar stream. A stream the
// sandbox cannot finish is cut, so the client sees it incomplete.
func (s *Server) getTar(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	p := r.URL.Query().Get("path")
	rc, err := sb.GetTar(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", apitype.ContentTypeTar)
	w.WriteHeader(http.StatusOK)
	if n, err := io.Copy(w, rc); err != nil {
		s.log.Warn("tar download cut short", "sandbox", sb.ID(), "path", p, "sent", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// boolParam is the query parameter name as a bool: false if absent.
func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%.40q: want true or false", sandbox.ErrInvalid, name, v)
	}
	return b, nil
}

// watch streams a directory's changes as NDJSON, or SSE, until the client
// goes or the directory does.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	q := r.URL.Query()
	recursive, err := boolParam(q, "recursive")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wt, err := sb.Watch(r.Context(), sandbox.WatchRequest{Path: q.Get("path"), Recursive: recursive})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer wt.Close()
	es := newEventStream(w, r)
	for {
		ev, err := wt.Next()
		switch {
		case errors.Is(err, io.EOF):
			return
		case err != nil:
			if r.Context().Err() == nil {
				es.send(apitype.WatchEvent{Type: apitype.WatchError, Time: time.Now(), Error: err.Error()})
			}
			return
		}
		if es.send(apitype.WatchEvent{Type: ev.Type, Path: ev.Path, IsDir: ev.IsDir, Time: ev.Time, Dropped: ev.Dropped}) != nil {
			return
		}
	}
}
