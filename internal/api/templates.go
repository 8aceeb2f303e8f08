package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/template"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func (s *Server) templateRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /v1/templates", s.auth(s.buildTemplate))
	m.HandleFunc("GET /v1/templates", s.auth(s.listTemplates))
	m.HandleFunc("GET /v1/templates/{name}", s.auth(s.getTemplate))
	m.HandleFunc("DELETE /v1/templates/{name}", s.auth(s.deleteTemplate))
}

func templateInfo(i template.Info) apitype.TemplateInfo {
	out := apitype.TemplateInfo{Name: i.Name, Base: i.Base, Image: i.Image, Digest: i.Digest,
		BuildMs: i.BuildTime.Milliseconds(), CreatedAtUnix: i.CreatedAt.Unix(), SizeBytes: i.SizeBytes, Cached: i.Cached,
		Steps: make([]apitype.TemplateStep, len(i.Steps))}
	for n, st := range i.Steps {
		out.Steps[n] = apitype.TemplateStep{Line: st.Line, Text: st.Text, Cache: st.Tag}
	}
	if i.Snapshot != nil {
		si := snapshotInfo(*i.Snapshot)
		out.Snapshot = &si
	}
	return out
}

// templatesOff answers when the daemon has no template manager.
func (s *Server) templatesOff(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Templates == nil {
		s.fail(w, r, fmt.Errorf("%w: this daemon does not build templates", sandbox.ErrUnavailable))
		return true
	}
	return false
}

// maxDockerfileBytes bounds the Dockerfile read from the context.
const maxDockerfileBytes = 1 << 20

// templateOptions reads a build's options from the query.
func templateOptions(r *http.Request) (template.BuildOptions, string, error) {
	q := r.URL.Query()
	o := template.BuildOptions{Name: q.Get("name"), Start: q.Get("start"), Ready: q.Get("ready"), PoolSize: -1}
	if o.Name == "" {
		return o, "", fmt.Errorf("%w: name is required", sandbox.ErrInvalid)
	}
	for _, kv := range q["build_arg"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, "", fmt.Errorf("%w: build_arg %q: want KEY=VALUE", sandbox.ErrInvalid, kv)
		}
		if o.BuildArgs == nil {
			o.BuildArgs = map[string]string{}
		}
		o.BuildArgs[k] = v
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"cpus", &o.CPUs}, {"memory_mib", &o.MemoryMiB}, {"disk_mib", &o.DiskMiB}, {"pool_size", &o.PoolSize}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return o, "", fmt.Errorf("%w: %s %q: want a whole number", sandbox.ErrInvalid, f.name, v)
			}
			*f.dst = n
		}
	}
	if v := q.Get("network"); v != "" {
		var p apitype.NetworkPolicy
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			return o, "", fmt.Errorf("%w: network: %v", sandbox.ErrInvalid, err)
		}
		o.Network = policy(&p)
	}
	df := q.Get("dockerfile")
	if df == "" {
		df = "Dockerfile"
	}
	return o, df, nil
}

// buildTemplate builds a template from the tar context in the body,
// streaming its progress as NDJSON.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	if s.templatesOff(w, r) {
		return
	}
	o, dfPath, err := templateOptions(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o.Context = r.Body
	o.DockerfilePath = dfPath
	st := &templateStream{es: newEventStream(w, r)}
	o.Progress = st.progress
	info, err := s.cfg.Templates.Build(r.Context(), o)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		if !st.es.started {
			s.fail(w, r, err)
			return
		}
		status, code := errStatus(err)
		s.logFailure(r, status, err)
		st.es.send(apitype.TemplateBuildEvent{Error: &apitype.ErrorBody{Error: err.Error() + hint(err), Code: code}})
		return
	}
	ti := templateInfo(info)
	st.es.send(apitype.TemplateBuildEvent{Template: &ti})
}

// templateStream sends a build's events as they come.
type templateStream struct {
	mu sync.Mutex
	es *eventStream
}

func (t *templateStream) progress(ev template.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := apitype.TemplateBuildEvent{Output: ev.Output}
	if ev.Step != nil {
		out.Step = &apitype.TemplateStepEvent{N: ev.Step.N, Total: ev.Step.Total, Line: ev.Step.Line, Text: ev.Step.Text, Cached: ev.Step.Cached}
	}
	t.es.send(out) // a client gone: the build ends with the request's context
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	if s.templatesOff(w, r) {
		return
	}
	infos, err := s.cfg.Templates.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]apitype.TemplateInfo, len(infos))
	for i, info := range infos {
		out[i] = templateInfo(info)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	if s.templatesOff(w, r) {
		return
	}
	info, err := s.cfg.Templates.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, templateInfo(info))
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if s.templatesOff(w, r) {
		return
	}
	if err := s.cfg.Templates.Delete(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
