// Package api serves cove's REST API over the sandbox service: forkd's v1
// routes (extended) under /v1, and sandboxd's four calls at the root.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/obs"
	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/template"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Config configures the API.
type Config struct {
	Service *sandbox.Service
	// APIKey is the daemon's own key (its token file): the bootstrap
	// admin key of the default tenant. Keys, if set, resolves it and every
	// key made with POST /v1/keys; nil: APIKey alone opens the API.
	APIKey  string
	Keys    *keys.Manager
	Version string
	// Info describes the daemon for GET /v1/info.
	Info   func(ctx context.Context) apitype.Info
	Logger *slog.Logger
	// MCP, if set, is served at /mcp (MCP Streamable HTTP) behind the same
	// API-key check as every other route.
	MCP http.Handler
	// Templates, if set, serves /v1/templates.
	Templates *template.Manager
	// BodyIdleTimeout is how long a request body may send nothing before
	// the connection is cut (0: 30 s). Only stalls count: an upload of
	// any size at any steady speed is fine.
	BodyIdleTimeout time.Duration

	// Preview, if set, serves the requests it matches (Host
	// PORT-ID.<domain>, or the E2B headers) before any API route, with
	// their own authentication, and names exposed ports' URLs. Nil: no
	// previews, and ports have no URL.
	Preview *preview.Proxy
	// PreviewScheme ("" is http) and PreviewPort are those of the listener
	// the API is served on, which preview URLs name.
	PreviewScheme string
	PreviewPort   int
	// PreviewHTTPSPort, if not zero, is the port of the daemon's HTTPS
	// preview listener: exposed ports get an https_url on it too.
	PreviewHTTPSPort int

	// Images is the image store the /v1/images routes serve (images.go).
	Images ImageStore

	// Audit, if set, gets a line for every mutating call.
	Audit *obs.Audit
	// Metrics, if set, is the registry GET /metrics serves; nil: the
	// server makes its own.
	Metrics *obs.Metrics
	// ReadUsage reads a sandbox's cgroup figures (nil: cgroup.ReadUsage).
	ReadUsage func(id string) (cgroup.Usage, error)
	// Usage, if set, serves GET /v1/usage and names sandboxes' tenants
	// in /metrics (usage.go); UsageQuotas completes its answers.
	Usage       UsageReporter
	UsageQuotas UsageQuotas
}

// Server is the REST API.
type Server struct {
	cfg Config
	svc *sandbox.Service
	log *slog.Logger
	mux *http.ServeMux
	// keys resolves API keys; every authenticated request runs under a
	// context its key's revocation cancels.
	keys *keys.Manager

	metrics *obs.Metrics
}

// maxJSONBody bounds JSON request bodies; file content is streamed and
// has no bound. It holds the largest exec stdin (agentproto.MaxStdin) with
// room for its escaping and the rest of the request.
const maxJSONBody = 64 << 20

// New returns the API's handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BodyIdleTimeout <= 0 {
		cfg.BodyIdleTimeout = defaultBodyIdle
	}
	s := &Server{cfg: cfg, svc: cfg.Service, log: cfg.Logger, mux: http.NewServeMux(), metrics: cfg.Metrics, keys: cfg.Keys}
	if s.keys == nil {
		s.keys = newKeys(cfg.APIKey)
	}
	if s.metrics == nil {
		s.metrics = obs.NewMetrics(s.gauges())
	}
	if s.svc != nil {
		s.metrics.Registry().MustRegister(statsCollector{s.svc.Stats()})
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /healthz", s.healthz)
	m.HandleFunc("GET /version", s.auth(s.version))
	m.HandleFunc("GET /metrics", s.auth(s.metricsHandler))
	m.HandleFunc("GET /v1/info", s.auth(s.info))

	m.HandleFunc("POST /v1/sandboxes", s.auth(s.createSandboxes))
	m.HandleFunc("GET /v1/sandboxes", s.auth(s.listSandboxes))
	m.HandleFunc("GET /v1/sandboxes/{id}", s.auth(s.getSandbox))
	m.HandleFunc("GET /v1/sandboxes/{id}/token", s.auth(s.sandboxToken))
	m.HandleFunc("DELETE /v1/sandboxes/{id}", s.auth(s.deleteSandbox))
	m.HandleFunc("POST /v1/sandboxes/{id}/extend", s.auth(s.extend))
	m.HandleFunc("PUT /v1/sandboxes/{id}/network", s.auth(s.setNetwork))

	// Branch and snapshot copy a sandbox's state: they take its token, as
	// the data plane does.
	m.HandleFunc("POST /v1/sandboxes/{id}/branch", s.data(s.branch(true)))
	m.HandleFunc("POST /v1/sandboxes/{id}/snapshot", s.data(s.branch(false)))

	m.HandleFunc("POST /v1/snapshots", s.auth(s.createSnapshot))
	m.HandleFunc("GET /v1/snapshots", s.auth(s.listSnapshots))
	m.HandleFunc("GET /v1/snapshots/{tag}", s.auth(s.getSnapshot))
	m.HandleFunc("DELETE /v1/snapshots/{tag}", s.auth(s.deleteSnapshot))

	s.templateRoutes(m)

	m.HandleFunc("POST /v1/sandboxes/{id}/ping", s.data(s.ping))
	m.HandleFunc("POST /v1/sandboxes/{id}/exec", s.data(s.exec))
	m.HandleFunc("POST /v1/sandboxes/{id}/eval", s.data(s.eval))
	m.HandleFunc("PUT /v1/sandboxes/{id}/files", s.data(s.putFile))
	m.HandleFunc("GET /v1/sandboxes/{id}/files", s.data(s.getFile))
	m.HandleFunc("GET /v1/sandboxes/{id}/list", s.data(s.listFiles))
	m.HandleFunc("POST /v1/sandboxes/{id}/wait", s.data(s.wait))
	s.fsRoutes(m)
	s.ptyRoutes(m)
	s.procRoutes(m)
	s.treeRoutes(m)
	s.imageRoutes(m)
	s.pauseRoutes(m)
	s.sandboxMetricsRoutes(m)
	s.usageRoutes(m)
	s.keyRoutes(m)
	m.HandleFunc("POST /v1/sandboxes/{id}/ports", s.data(s.exposePort))
	m.HandleFunc("GET /v1/sandboxes/{id}/ports", s.data(s.listPorts))
	m.HandleFunc("DELETE /v1/sandboxes/{id}/ports/{port}", s.data(s.unexposePort))
	m.HandleFunc("GET /v1/sandboxes/{id}/ports/{port}/connect", s.data(s.connectPort))

	// sandboxd's API, verbatim.
	m.HandleFunc("POST /sandboxes", s.auth(s.compatCreate))
	m.HandleFunc("POST /sandboxes/{id}/exec", s.data(s.exec))
	m.HandleFunc("PUT /sandboxes/{id}/files/{path...}", s.data(s.compatPutFile))
	m.HandleFunc("DELETE /sandboxes/{id}", s.auth(s.deleteSandbox))

	if s.cfg.MCP != nil {
		m.HandleFunc("/mcp", s.auth(s.cfg.MCP.ServeHTTP))
	}

	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, fmt.Sprintf("no route for %s %s: see docs/API.md", r.Method, r.URL.Path))
	})
}

// ServeHTTP implements http.Handler: a preview request goes to the preview
// proxy, anything else to the API's routes. A panic becomes a 500 with a
// short message, never a stack trace.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.recoverPanic(w, r)
	if p := s.cfg.Preview; p != nil {
		// Before the body watch: a preview streams, or becomes a
		// WebSocket, for as long as its two ends want.
		if _, _, ok := p.Match(r); ok {
			p.ServeHTTP(w, r)
			return
		}
	}
	s.observe(w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Inside observe too, so a panic's 500 is counted and audited.
		defer s.recoverPanic(w, r)
		watchBody(w, r, s.cfg.BodyIdleTimeout)
		s.mux.ServeHTTP(w, r)
	}))
}

// recoverPanic turns a handler's panic into a 500.
func (s *Server) recoverPanic(w http.ResponseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.log.ErrorContext(r.Context(), "handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
	writeError(w, http.StatusInternalServerError, apitype.CodeInternal, "internal error")
}

// data requires the API key and the sandbox's own token, and hands the
// handler the opened sandbox.
func (s *Server) data(h func(http.ResponseWriter, *http.Request, *sandbox.Sandbox)) http.HandlerFunc {
	return s.auth(func(w http.ResponseWriter, r *http.Request) {
		// A paused sandbox created with auto_resume is resumed first.
		sb, err := s.svc.OpenAuto(r.Context(), r.PathValue("id"), sandboxToken(r))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r, sb)
	})
}

// sandboxToken is the sandbox token a request carries, under either name.
func sandboxToken(r *http.Request) string {
	if t := r.Header.Get(apitype.SandboxTokenHeader); t != "" {
		return t
	}
	return r.Header.Get(apitype.SandboxTokenHeaderAlt)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// writeError answers with an error body naming the request's id, which
// its log lines and audit line carry too.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apitype.ErrorBody{Error: msg, Code: code, RequestID: noteError(w, code)})
}

// fail writes err with the status its sentinel maps to.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if bodyStalled(r) {
		// Whatever failed, it failed because the client stopped sending.
		s.log.InfoContext(r.Context(), "request body stalled", "method", r.Method, "path", r.URL.Path, "idle", s.cfg.BodyIdleTimeout)
		writeError(w, http.StatusRequestTimeout, apitype.CodeTimeout, fmt.Sprintf("the request body stalled: nothing arrived for %s", s.cfg.BodyIdleTimeout))
		return
	}
	status, code := errStatus(err)
	if errors.Is(err, sandbox.ErrRetry) {
		w.Header().Set("Retry-After", strconv.Itoa(int(sandbox.RetryAfter/time.Second)))
	}
	s.logFailure(r, status, err)
	writeError(w, status, code, err.Error()+hint(err))
}

// logFailure logs a request that failed with status because of err: a
// failure of the daemon's own, not the client's or a passing one.
func (s *Server) logFailure(r *http.Request, status int, err error) {
	if status >= 500 && !errors.Is(err, sandbox.ErrRetry) {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
}

// errStatus is the status and code err's sentinel maps to.
func errStatus(err error) (int, string) {
	switch {
	case errors.Is(err, sandbox.ErrDead):
		return http.StatusGone, apitype.CodeGone
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, netpolicy.ErrInvalid):
		return http.StatusBadRequest, apitype.CodeBadRequest
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, preview.ErrNotFound):
		return http.StatusNotFound, apitype.CodeNotFound
	case errors.Is(err, sandbox.ErrForbidden):
		return http.StatusForbidden, apitype.CodeForbidden
	case errors.Is(err, sandbox.ErrConflict):
		return http.StatusConflict, apitype.CodeConflict
	case errors.Is(err, sandbox.ErrLimit):
		return http.StatusTooManyRequests, apitype.CodeLimit
	case errors.Is(err, sandbox.ErrQuota):
		return http.StatusTooManyRequests, apitype.CodeQuota
	case errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, apitype.CodeTooLarge
	case errors.Is(err, sandbox.ErrNoSpace):
		return http.StatusInsufficientStorage, apitype.CodeNoSpace
	case errors.Is(err, sandbox.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, apitype.CodeTimeout
	case errors.Is(err, sandbox.ErrUnavailable):
		return http.StatusServiceUnavailable, apitype.CodeUnavailable
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
		return 499, "canceled"
	}
	return http.StatusInternalServerError, apitype.CodeInternal
}

// hint is what the API adds to a service error: the service knows neither
// the routes nor the headers a client has to use next.
func hint(err error) string {
	switch {
	case errors.Is(err, sandbox.ErrNoSandbox):
		return " (it may have expired or been killed; list sandboxes with GET /v1/sandboxes)"
	case errors.Is(err, sandbox.ErrNoSnapshot):
		return " (list snapshots with GET /v1/snapshots)"
	case errors.Is(err, sandbox.ErrNoToken):
		return " in the " + apitype.SandboxTokenHeader + " header (it was returned when the sandbox was created)"
	case errors.Is(err, sandbox.ErrDead):
		return " (GET /v1/sandboxes/{id} shows dead_reason until the daemon forgets it; create a new sandbox)"
	case errors.Is(err, sandbox.ErrRetry):
		return " (try again after Retry-After)"
	case errors.Is(err, sandbox.ErrPaused):
		return " (POST /v1/sandboxes/{id}/resume; or create it with auto_resume)"
	case errors.Is(err, sandbox.ErrNoSpace):
		return " (GET /v1/snapshots and /v1/templates list what takes space: DELETE what is no longer needed)"
	}
	return ""
}

// decode reads a JSON body into v, strictly: unknown fields and trailing
// data are errors, so a misspelt field is reported instead of ignored. An
// empty body leaves v as it is when emptyOK.
func decode(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && emptyOK {
			return nil
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body over %d bytes: put large input in a file", sandbox.ErrTooLarge, maxJSONBody)
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: request body is empty: send a JSON object", sandbox.ErrInvalid)
		}
		return fmt.Errorf("%w: malformed JSON: %v", sandbox.ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: malformed JSON: data after the object", sandbox.ErrInvalid)
	}
	return nil
}

// ttl converts a request's ttl_secs for the service, which checks it. It
// saturates instead of overflowing, so that a huge value stays too big.
func ttl(secs int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Second)
	return time.Duration(min(max(secs, -limit), limit)) * time.Second
}

// secs converts a non-negative number of seconds from a request.
func secs(name string, v float64, max time.Duration) (time.Duration, error) {
	if v < 0 {
		return 0, fmt.Errorf("%w: %s must not be negative", sandbox.ErrInvalid, name)
	}
	d := time.Duration(v * float64(time.Second))
	if v > max.Seconds() {
		return 0, fmt.Errorf("%w: %s must be at most %d", sandbox.ErrInvalid, name, int64(max.Seconds()))
	}
	return d, nil
}
