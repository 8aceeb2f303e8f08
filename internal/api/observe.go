package api

import (
	"context"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/internal/obs"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/prometheus/client_golang/prometheus"
)

// obsWriter records what a handler answers: its status, and (through
// writeError) its error code, for the metrics and the audit log.
type obsWriter struct {
	http.ResponseWriter
	req    *obs.Request
	status int
	who    *tenant.Principal // set by auth
}

func (w *obsWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *obsWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// hijacks for WebSockets and port tunnels).
func (w *obsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe serves r through next with a request id (echoed in the
// response, carried in the context for logs and error bodies), then
// counts it in the metrics and, if it mutates, writes its audit line.
func (s *Server) observe(w http.ResponseWriter, r *http.Request, next http.Handler) {
	start := time.Now()
	req := &obs.Request{ID: obs.NewRequestID(r.Header.Get(obs.RequestIDHeader))}
	w.Header().Set(obs.RequestIDHeader, req.ID)
	r = r.WithContext(obs.WithRequest(r.Context(), req))
	ow := &obsWriter{ResponseWriter: w, req: req}
	// The mux sets r.Pattern on the request it is given, so it is read
	// after: the route pattern, never the path, keeps labels bounded.
	defer func() {
		d := time.Since(start)
		status := ow.status
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.ObserveRequest(r.Pattern, req.Op, status, req.Code, d)
		if s.cfg.Audit != nil && mutating(r.Method) {
			s.writeAudit(r, req, ow, status, d)
		}
	}()
	next.ServeHTTP(ow, r)
}

// mutating reports whether a request of method may change state.
func mutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func (s *Server) writeAudit(r *http.Request, req *obs.Request, ow *obsWriter, status int, d time.Duration) {
	id := r.PathValue("id")
	if id == "" {
		id = req.SandboxID
	}
	e := obs.AuditEntry{
		Time: time.Now().UTC(), RequestID: req.ID, Who: who(r, ow.who), Method: r.Method, Route: r.Pattern,
		SandboxID: id, Status: status, Code: req.Code, DurationMs: float64(d.Microseconds()) / 1000, Remote: r.RemoteAddr,
	}
	if e.Route == "" {
		e.Route = "unmatched"
	}
	if err := s.cfg.Audit.Write(e); err != nil {
		s.log.ErrorContext(r.Context(), "audit log write failed", "err", err)
	}
}

// who names the credentials a request carried, never their values: the
// key's id and tenant ("key-0123456789ab@acme", "bootstrap@default"),
// with "+sandbox_token" when it carried a sandbox's token too, or
// "anonymous" when no key let it in.
func who(r *http.Request, p *tenant.Principal) string {
	if p == nil {
		return "anonymous"
	}
	w := p.KeyID + "@" + p.Tenant
	if sandboxToken(r) != "" {
		w += "+sandbox_token"
	}
	return w
}

// noteError records an error answer's code on w's request, and returns
// the request id for the error body.
func noteError(w http.ResponseWriter, code string) string {
	for {
		switch x := w.(type) {
		case *obsWriter:
			x.req.Code = code
			return x.req.ID
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return ""
		}
	}
}

// metricsHandler serves the daemon's Prometheus registry.
func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	s.metrics.Handler().ServeHTTP(w, r)
}

// gauges reads the service's figures for each scrape.
func (s *Server) gauges() obs.Gauges {
	return obs.Gauges{
		SandboxStates: func() map[obs.SandboxKey]int {
			out := map[obs.SandboxKey]int{}
			for _, i := range s.svc.List(context.Background()) {
				out[obs.SandboxKey{State: i.Status, Tenant: s.tenantOf(i.ID)}]++
			}
			return out
		},
		PoolSizes: func() map[string]int {
			out := map[string]int{}
			for _, sn := range s.svc.Snapshots(context.Background()) {
				out[sn.Tag] = sn.PoolReady
			}
			return out
		},
	}
}

// statsCollector shows the service's running counters.
type statsCollector struct{ st *sandbox.Stats }

var statsDescs = []struct {
	d *prometheus.Desc
	v func(*sandbox.Stats) int64
}{
	{prometheus.NewDesc("cove_sandboxes_created_total", "Sandboxes created.", nil, nil), func(st *sandbox.Stats) int64 { return st.Created.Load() }},
	{prometheus.NewDesc("cove_sandboxes_destroyed_total", "Sandboxes destroyed.", nil, nil), func(st *sandbox.Stats) int64 { return st.Destroyed.Load() }},
	{prometheus.NewDesc("cove_sandboxes_expired_total", "Sandboxes destroyed at expiry.", nil, nil), func(st *sandbox.Stats) int64 { return st.Expired.Load() }},
	{prometheus.NewDesc("cove_create_failures_total", "Create calls that failed.", nil, nil), func(st *sandbox.Stats) int64 { return st.Failures.Load() }},
	{prometheus.NewDesc("cove_execs_total", "Commands run.", nil, nil), func(st *sandbox.Stats) int64 { return st.Execs.Load() }},
	{prometheus.NewDesc("cove_pool_hits_total", "Sandboxes handed out from a warm pool.", nil, nil), func(st *sandbox.Stats) int64 { return st.PoolHits.Load() }},
	{prometheus.NewDesc("cove_sandboxes_died_total", "Sandboxes whose runtime process ended while they ran.", nil, nil), func(st *sandbox.Stats) int64 { return st.Died.Load() }},
}

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range statsDescs {
		ch <- d.d
	}
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range statsDescs {
		ch <- prometheus.MustNewConstMetric(d.d, prometheus.CounterValue, float64(d.v(c.st)))
	}
}
