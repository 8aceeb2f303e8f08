package preview

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

const testToken = "0123456789abcdef0123456789abcdef"

// exposure is one port a fakeBackend exposes: reached at addr, or by dial
// when set.
type exposure struct {
	addr   string
	token  string
	public bool
	dial   func(ctx context.Context) (net.Conn, error)
}

// fakeBackend exposes ports keyed "id/port", dialling loopback servers.
type fakeBackend struct {
	ports map[string]exposure
}

func (b *fakeBackend) Exposure(id string, port int) (string, bool, error) {
	e, ok := b.ports[fmt.Sprintf("%s/%d", id, port)]
	if !ok {
		return "", false, fmt.Errorf("sandbox %s port %d: %w", id, port, ErrNotFound)
	}
	return e.token, e.public, nil
}

func (b *fakeBackend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	e, ok := b.ports[fmt.Sprintf("%s/%d", id, port)]
	if !ok {
		return nil, ErrNotFound
	}
	if e.dial != nil {
		return e.dial(ctx)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", e.addr)
}

// seen is what an upstream received, as the upstream saw it.
type seen struct {
	Host   string      `json:"host"`
	Path   string      `json:"path"`
	Query  string      `json:"query"`
	Header http.Header `json:"header"`
}

// upstream is a guest's server: /echo answers what it received (and keeps
// a dump of it), /stream sends a chunk and waits for release before the
// next, /ws echoes WebSocket messages.
type upstream struct {
	*httptest.Server
	release chan struct{}
	mu      sync.Mutex
	dumps   []string
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		dump, _ := httputil.DumpRequest(r, true)
		u.mu.Lock()
		u.dumps = append(u.dumps, string(dump))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(seen{Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header})
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo:"), msg...)); err != nil {
				return
			}
		}
	})
	u.Server = httptest.NewServer(mux)
	t.Cleanup(u.Close)
	return u
}

// sawText reports whether any request the upstream received contained s.
func (u *upstream) sawText(s string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, d := range u.dumps {
		if strings.Contains(d, s) {
			return true
		}
	}
	return false
}

// harness is a Proxy served by a test server, and a client whose every
// connection goes to that server whatever the URL's host, so URLs can name
// preview hosts such as 8000-sb-x.localhost.
type harness struct {
	proxy  *Proxy
	srv    *httptest.Server
	client *http.Client
	up     *upstream
}

func newHarness(t testing.TB, ports map[string]exposure) *harness {
	t.Helper()
	up := newUpstream(t)
	for k, e := range ports {
		if e.addr == "" && e.dial == nil {
			e.addr = up.Listener.Addr().String()
			ports[k] = e
		}
	}
	p := New(Config{Backend: &fakeBackend{ports: ports}, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	h := &harness{proxy: p, srv: srv, up: up}
	h.client = &http.Client{
		Transport: &http.Transport{DialContext: h.dial},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	t.Cleanup(h.client.CloseIdleConnections)
	return h
}

func (h *harness) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", h.srv.Listener.Addr().String())
}

// url is a preview URL on the harness's server.
func (h *harness) url(id string, port int, path string) string {
	return fmt.Sprintf("http://%d-%s.localhost:%s%s", port, id, portOf(h.srv.Listener.Addr()), path)
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func (h *harness) get(t *testing.T, url string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestMatch(t *testing.T) {
	p := New(Config{})
	custom := New(Config{Domain: "Preview.Example.COM."})
	long := strings.Repeat("a", 41)
	for _, tc := range []struct {
		p      *Proxy
		host   string
		header map[string]string
		id     string
		port   int
		ok     bool
	}{
		{p: p, host: "8000-sb-x.localhost", id: "sb-x", port: 8000, ok: true},
		{p: p, host: "8000-sb-x.localhost:7070", id: "sb-x", port: 8000, ok: true},
		{p: p, host: "8000-SB-0123ABC.LocalHost:7070", id: "sb-0123abc", port: 8000, ok: true},
		{p: p, host: "8000-sb-x.localhost.", id: "sb-x", port: 8000, ok: true},
		{p: p, host: "1-a.localhost", id: "a", port: 1, ok: true},
		{p: p, host: "65535-a.localhost", id: "a", port: 65535, ok: true},
		{p: p, host: "0-sb-x.localhost"},
		{p: p, host: "65536-sb-x.localhost"},
		{p: p, host: "080-sb-x.localhost"},
		{p: p, host: "+80-sb-x.localhost"},
		{p: p, host: "8000-.localhost"},
		{p: p, host: "8000-sb_x.localhost"},
		{p: p, host: "8000-" + long + ".localhost"},
		{p: p, host: "8000sb.localhost"},
		{p: p, host: "a.8000-sb-x.localhost"},
		{p: p, host: "8000-sb-x.localhost.evil.com"},
		{p: p, host: "8000-sb-x.example.com"},
		{p: p, host: "localhost:7070"},
		{p: p, host: "127.0.0.1:7070"},
		{p: p, host: "[::1]:7070"},
		{p: p, host: ""},
		{p: custom, host: "3000-sb-y.preview.example.com:443", id: "sb-y", port: 3000, ok: true},
		{p: custom, host: "3000-sb-y.localhost"},
		// E2B's headers, on any host.
		{p: p, host: "localhost:7070", header: map[string]string{HeaderSandboxID: "sb-x", HeaderSandboxPort: "8000"},
			id: "sb-x", port: 8000, ok: true},
		{p: p, host: "127.0.0.1", header: map[string]string{"e2b-sandbox-id": "SB-X", "e2b-sandbox-port": "3000"},
			id: "sb-x", port: 3000, ok: true},
		{p: p, host: "localhost", header: map[string]string{HeaderSandboxID: "sb-x"}},
		{p: p, host: "localhost", header: map[string]string{HeaderSandboxPort: "8000"}},
		{p: p, host: "localhost", header: map[string]string{HeaderSandboxID: "sb-x", HeaderSandboxPort: "http"}},
		{p: p, host: "localhost", header: map[string]string{HeaderSandboxID: "../x", HeaderSandboxPort: "80"}},
		{p: p, host: "localhost", header: map[string]string{HeaderSandboxID: "sb-x", HeaderSandboxPort: "70000"}},
		// The host wins over headers.
		{p: p, host: "8000-sb-x.localhost", header: map[string]string{HeaderSandboxID: "sb-y", HeaderSandboxPort: "1"},
			id: "sb-x", port: 8000, ok: true},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = tc.host
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		id, port, ok := tc.p.Match(r)
		if id != tc.id || port != tc.port || ok != tc.ok {
			t.Errorf("Match(host %q, %v) = %q, %d, %v; want %q, %d, %v",
				tc.host, tc.header, id, port, ok, tc.id, tc.port, tc.ok)
		}
	}
}

func TestURL(t *testing.T) {
	p := New(Config{})
	custom := New(Config{Domain: "dev.example.org"})
	for _, tc := range []struct {
		p      *Proxy
		scheme string
		listen int
		want   string
	}{
		{p, "http", 7070, "http://8000-sb-x.localhost:7070"},
		{p, "http", 80, "http://8000-sb-x.localhost"},
		{p, "https", 443, "https://8000-sb-x.localhost"},
		{p, "https", 8443, "https://8000-sb-x.localhost:8443"},
		{p, "http", 443, "http://8000-sb-x.localhost:443"},
		{p, "https", 80, "https://8000-sb-x.localhost:80"},
		{p, "http", 0, "http://8000-sb-x.localhost"},
		{custom, "https", 443, "https://8000-sb-x.dev.example.org"},
	} {
		if got := tc.p.URL(tc.scheme, tc.listen, "sb-x", 8000); got != tc.want {
			t.Errorf("URL(%s, %d) = %q, want %q", tc.scheme, tc.listen, got, tc.want)
		}
		// Every URL the proxy makes is one it matches.
		r := httptest.NewRequest(http.MethodGet, tc.want, nil)
		if id, port, ok := tc.p.Match(r); !ok || id != "sb-x" || port != 8000 {
			t.Errorf("Match(%s) = %q, %d, %v", tc.want, id, port, ok)
		}
	}
}

func TestProxyRoutes(t *testing.T) {
	h := newHarness(t, map[string]exposure{
		"sb-x/8000": {public: true},
		"sb-x/3000": {token: testToken},
	})
	for _, tc := range []struct {
		name   string
		url    string
		header http.Header
		status int
		body   string // in the answer
	}{
		{"host", h.url("sb-x", 8000, "/a/b?c=d"), nil, 200, `"path":"/a/b"`},
		{"e2b headers", h.srv.URL + "/e2b",
			http.Header{HeaderSandboxID: {"sb-x"}, HeaderSandboxPort: {"8000"}}, 200, `"path":"/e2b"`},
		{"unknown sandbox", h.url("sb-nope", 8000, "/"), nil, 404, "Sandbox sb-nope does not expose port 8000."},
		{"port not exposed", h.url("sb-x", 9000, "/"), nil, 404, "Sandbox sb-x does not expose port 9000."},
		{"no preview host", h.srv.URL + "/", nil, 404, "This is not a preview URL."},
		{"private without token", h.url("sb-x", 3000, "/"), nil, 401, "needs its token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.get(t, tc.url, tc.header)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) {
				t.Fatalf("GET %s: %d %q; want %d with %q", tc.url, resp.StatusCode, body, tc.status, tc.body)
			}
			if tc.status != 200 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
				t.Errorf("error page is %q, not HTML", resp.Header.Get("Content-Type"))
			}
		})
	}
}

// TestProxyForwards checks what the guest's server sees: the client's
// Host, X-Forwarded-*, and no routing headers of cove's.
func TestProxyForwards(t *testing.T) {
	h := newHarness(t, map[string]exposure{"sb-x/8000": {public: true}})
	resp, body := h.get(t, h.url("sb-x", 8000, "/p?q=1"), http.Header{
		"X-Forwarded-For": {"6.6.6.6"}, HeaderSandboxID: {"sb-y"}, HeaderSandboxPort: {"1"},
	})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var s seen
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	wantHost := "8000-sb-x.localhost:" + portOf(h.srv.Listener.Addr())
	if s.Host != wantHost || s.Query != "q=1" {
		t.Errorf("upstream saw host %q query %q; want %q, q=1", s.Host, s.Query, wantHost)
	}
	if got := s.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client's address only", got)
	}
	if got := s.Header.Get("X-Forwarded-Host"); got != wantHost {
		t.Errorf("X-Forwarded-Host = %q, want %q", got, wantHost)
	}
	if got := s.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto = %q", got)
	}
	if s.Header.Get(HeaderSandboxID) != "" || s.Header.Get(HeaderSandboxPort) != "" {
		t.Errorf("routing headers reached the upstream: %v", s.Header)
	}
}

// TestProxy502 checks that a port nothing listens on answers at once, and
// one whose connection hangs answers within the dial timeout.
func TestProxy502(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	hang := func(ctx context.Context) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	h := newHarness(t, map[string]exposure{
		"sb-x/8000": {public: true, addr: closed},
		"sb-x/8001": {public: true, dial: hang},
	})
	for _, tc := range []struct {
		port  int
		limit time.Duration
	}{
		{8000, time.Second},
		{8001, dialTimeout + time.Second},
	} {
		start := time.Now()
		resp, body := h.get(t, h.url("sb-x", tc.port, "/"), nil)
		took := time.Since(start)
		t.Logf("port %d: 502 in %s", tc.port, took)
		want := fmt.Sprintf("Nothing listens on port %d in sandbox sb-x.", tc.port)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, want) {
			t.Errorf("port %d: %d %q; want 502 with %q", tc.port, resp.StatusCode, body, want)
		}
		if took > tc.limit {
			t.Errorf("port %d: 502 took %s, more than %s", tc.port, took, tc.limit)
		}
	}
}

// TestProxyStreams checks that a chunk reaches the client while the
// upstream's handler is still running.
func TestProxyStreams(t *testing.T) {
	h := newHarness(t, map[string]exposure{"sb-x/8000": {public: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url("sb-x", 8000, "/stream"), nil)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q, %v", line, err)
	}
	close(h.up.release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("rest: %q, %v", rest, err)
	}
}

func TestProxyWebSocket(t *testing.T) {
	h := newHarness(t, map[string]exposure{"sb-x/8000": {token: testToken}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := strings.Replace(h.url("sb-x", 8000, "/ws"), "http:", "ws:", 1)
	// The token in a header, or in the URL (a WebSocket follows no
	// redirect, so that is served at once).
	for _, tc := range []struct {
		url    string
		header http.Header
	}{
		{url, http.Header{TokenHeader: {testToken}}},
		{url + "?token=" + testToken, nil},
	} {
		c, resp, err := websocket.Dial(ctx, tc.url, &websocket.DialOptions{HTTPClient: h.client, HTTPHeader: tc.header})
		if err != nil {
			t.Fatalf("dial %s: %v (%v)", tc.url, err, resp)
		}
		c.SetReadLimit(1 << 20)
		for _, msg := range []string{"hello", strings.Repeat("x", 100<<10)} {
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "echo:"+msg {
				t.Fatalf("echo of %d bytes: got %d bytes", len(msg), len(got))
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	if h.up.sawText(testToken) {
		t.Error("the token reached the upstream")
	}

	// Without the token the upgrade is refused.
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: h.client})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("dial without token: %v, %v; want 401", resp, err)
	}
}

// TestProxyUpstreamFailure checks that a failure after the request went out
// is not reported as a port nothing listens on.
func TestProxyUpstreamFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("not http\r\n\r\n"))
			c.Close()
		}
	}()
	h := newHarness(t, map[string]exposure{"sb-x/8000": {public: true, addr: l.Addr().String()}})
	resp, body := h.get(t, h.url("sb-x", 8000, "/"), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "did not answer properly") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func TestBackendErrors(t *testing.T) {
	p := New(Config{Backend: errBackend{}, Logger: slog.New(slog.DiscardHandler)})
	r := httptest.NewRequest(http.MethodGet, "http://8000-sb-x.localhost/", nil)
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "cannot be reached now") {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
}

type errBackend struct{}

func (errBackend) Exposure(string, int) (string, bool, error) {
	return "", false, errors.New("store broken")
}
func (errBackend) DialPort(context.Context, string, int) (net.Conn, error) {
	return nil, errors.New("unreachable")
}

// BenchmarkProxy compares a small GET through the proxy with the same GET
// straight to the upstream, both over keep-alive connections.
func BenchmarkProxy(b *testing.B) {
	h := newHarness(b, map[string]exposure{"sb-x/8000": {token: testToken}})
	direct := &http.Client{Transport: &http.Transport{}}
	defer direct.CloseIdleConnections()
	for _, bc := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", direct, h.up.URL + "/"},
		{"proxied", h.client, h.url("sb-x", 8000, "/")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, bc.url, nil)
				req.Header.Set(TokenHeader, testToken)
				resp, err := bc.client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
