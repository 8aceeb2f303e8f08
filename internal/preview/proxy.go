// Package preview serves the ports a sandbox exposes: preview URLs of the
// form PORT-ID.<domain> (or E2B's routing headers) answered by a reverse
// proxy in the daemon, which dials the guest's port through a Backend. It
// also holds the local CA that gives those URLs HTTPS, and the raw TCP
// tunnel behind `cove port-forward`.
package preview

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// ErrNotFound is what a Backend wraps for a sandbox it does not know, that
// is dead, or that does not expose the port.
var ErrNotFound = errors.New("no such exposed port")

// Backend knows the sandboxes and reaches their ports.
type Backend interface {
	// Exposure of port on sandbox id: its token and whether it is public; ErrNotFound-wrapped if the
	// sandbox is unknown, dead, or the port is not exposed.
	Exposure(id string, port int) (token string, public bool, err error)
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

// Config configures a Proxy.
type Config struct {
	Domain  string // preview domain; "" means "localhost"
	Backend Backend
	Logger  *slog.Logger
}

// Headers of E2B's proxy convention, which route a request by header rather
// than by host (for clients on the daemon's own host).
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
)

const (
	// dialTimeout bounds reaching a guest's port: a port nothing listens on
	// answers 502 at once (refused) or after this (dropped), never a hang.
	dialTimeout = 2 * time.Second
	// idleConnTimeout and maxIdlePerPort bound the keep-alive connections
	// kept to guest ports between requests.
	idleConnTimeout = 30 * time.Second
	maxIdlePerPort  = 4
)

// Proxy answers preview requests.
type Proxy struct {
	domain  string
	backend Backend
	log     *slog.Logger
	rp      *httputil.ReverseProxy
}

// New returns a Proxy for cfg.
func New(cfg Config) *Proxy {
	p := &Proxy{
		domain:  normalizeDomain(cfg.Domain),
		backend: cfg.Backend,
		log:     cfg.Logger,
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     p.transport(),
		FlushInterval: -1, // streams (SSE, chunked logs) reach the client as they come
		ErrorHandler:  p.proxyError,
		ErrorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	return p
}

func normalizeDomain(d string) string {
	d = strings.Trim(strings.ToLower(d), ".")
	if d == "" {
		return "localhost"
	}
	return d
}

// Match reports whether r is a preview request: Host "PORT-ID.<domain>[:p]" or headers
// E2b-Sandbox-Id + E2b-Sandbox-Port.
func (p *Proxy) Match(r *http.Request) (id string, port int, ok bool) {
	if id, port, ok := parseHost(r.Host, p.domain); ok {
		return id, port, true
	}
	hid, hport := r.Header.Get(HeaderSandboxID), r.Header.Get(HeaderSandboxPort)
	if hid == "" || hport == "" {
		return "", 0, false
	}
	port, ok = parsePort(hport)
	id = strings.ToLower(hid)
	if !ok || !runtime.ValidID(id) {
		return "", 0, false
	}
	return id, port, true
}

// parseHost parses "PORT-ID.<domain>", with an optional :port, in any
// case; domain is normalized.
func parseHost(host, domain string) (id string, port int, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, ok := strings.CutSuffix(host, "."+domain)
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok {
		return "", 0, false
	}
	port, ok = parsePort(ps)
	if !ok || !runtime.ValidID(id) {
		return "", 0, false
	}
	return id, port, true
}

// parsePort accepts a TCP port in plain decimal: 1..65535, no sign, no
// leading zero, so that one port has one host name.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n <= 65535
}

// URL is the preview URL of port on sandbox id, for a daemon listening on
// listenPort with scheme: "http://8000-ID.localhost:7070". The port is left
// out when it is the scheme's default (or 0).
func (p *Proxy) URL(scheme string, listenPort int, id string, port int) string {
	u := fmt.Sprintf("%s://%d-%s.%s", scheme, port, id, p.domain)
	if listenPort != 0 && !(scheme == "http" && listenPort == 80) && !(scheme == "https" && listenPort == 443) {
		u += ":" + strconv.Itoa(listenPort)
	}
	return u
}

// target is what the Transport dials, named in the outbound URL's host so
// that keep-alive connections are pooled per sandbox port.
type target struct {
	id   string
	port int
}

type targetKey struct{}

// ServeHTTP answers a matched request: auth, proxy (HTTP, streaming, WebSocket).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, ok := p.Match(r)
	if !ok {
		page(w, http.StatusNotFound, "Not found", "This is not a preview URL.")
		return
	}
	token, public, err := p.backend.Exposure(id, port)
	if errors.Is(err, ErrNotFound) {
		page(w, http.StatusNotFound, "Not found",
			fmt.Sprintf("Sandbox %s does not expose port %d.", id, port))
		return
	}
	if err != nil {
		p.log.Warn("preview: exposure", "sandbox", id, "port", port, "err", err)
		page(w, http.StatusBadGateway, "Bad gateway",
			fmt.Sprintf("Sandbox %s cannot be reached now.", id))
		return
	}
	// A copy, since authorize strips cove's credentials from it.
	r = r.Clone(context.WithValue(r.Context(), targetKey{}, target{id, port}))
	if !authorize(w, r, id, port, token, public) {
		return
	}
	// A stream or a WebSocket may last as long as its client wants: no
	// server deadline set for ordinary requests may cut it.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	p.rp.ServeHTTP(w, r)
}

// rewrite sends the request to the guest's port, keeping the Host the
// client asked for (dev servers check it, and build absolute URLs from it).
func rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.SetURL(&url.URL{Scheme: "http", Host: net.JoinHostPort(t.id, strconv.Itoa(t.port))})
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	pr.Out.Header.Del(HeaderSandboxID)
	pr.Out.Header.Del(HeaderSandboxPort)
}

// dialError marks a failure to reach the guest's port, as against a
// failure after the request went out.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// transport dials every connection through the Backend. It never uses an
// HTTP proxy from the environment, leaves content encodings alone, and has
// no response header timeout: a dev server may take long to compile a first
// page, and the client's going away ends the wait.
func (p *Proxy) transport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t, ok := ctx.Value(targetKey{}).(target)
			if !ok {
				return nil, errors.New("preview: no target")
			}
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			c, err := p.backend.DialPort(ctx, t.id, t.port)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		DisableCompression:    true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   maxIdlePerPort,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// proxyError answers a request the proxy could not carry out.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	if r.Context().Err() != nil {
		p.log.Debug("preview: client gone", "sandbox", t.id, "port", t.port, "err", err)
		return
	}
	var de *dialError
	if errors.As(err, &de) {
		p.log.Debug("preview: dial", "sandbox", t.id, "port", t.port, "err", err)
		page(w, http.StatusBadGateway, "Nothing listens here",
			fmt.Sprintf("Nothing listens on port %d in sandbox %s. Start a server on 0.0.0.0:%d there and reload.",
				t.port, t.id, t.port))
		return
	}
	p.log.Debug("preview: upstream", "sandbox", t.id, "port", t.port, "err", err)
	page(w, http.StatusBadGateway, "Bad gateway",
		fmt.Sprintf("The server on port %d in sandbox %s did not answer properly.", t.port, t.id))
}

// page answers a small HTML page: what a browser user reads when a preview
// URL cannot be served.
func page(w http.ResponseWriter, status int, title, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>%d %s</title></head>\n"+
		"<body><h1>%d %s</h1>\n<p>%s</p>\n<p><small>cove preview</small></p></body></html>\n",
		status, html.EscapeString(title), status, html.EscapeString(title), html.EscapeString(msg))
}
