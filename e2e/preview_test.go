package e2e

// Exposed ports and preview URLs: servers inside a sandbox reached through
// the daemon's reverse proxy (HTTP, streaming, WebSocket, a real browser)
// and through the connect tunnel, and gone with the sandbox.

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// previewHeader carries a preview URL's token.
const previewHeader = "X-Cove-Preview-Token"

// pageColour is the background of the page the sandbox serves; the
// browser's screenshot must show it.
var pageColour = [3]uint8{0xff, 0x00, 0xcc}

// appServer serves, in the sandbox: GET / a page of pageColour, GET
// /stream three chunks a second apart, and a WebSocket echo on /ws, with
// nothing but Python's standard library.
const appServer = `import base64, hashlib, http.server, socketserver, struct, sys, time
PAGE = b"<!doctype html><html><head><title>cove preview</title></head><body style='margin:0;background:#ff00cc'><h1>cove-preview-page</h1></body></html>"
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path.startswith("/ws"):
            return self.ws()
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                data = b"chunk %d\n" % i
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(1)
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)
    def ws(self):
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 9:
                op = 10
            hdr = bytes([0x80 | op])
            if len(data) < 126:
                hdr += bytes([len(data)])
            elif len(data) < 65536:
                hdr += bytes([126]) + struct.pack(">H", len(data))
            else:
                hdr += bytes([127]) + struct.pack(">Q", len(data))
            w.write(hdr + data)
            w.flush()
            if op == 8:
                return
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
`

// startAppServer starts appServer on port inside sb and waits until it
// listens.
func startAppServer(t *testing.T, d *daemon, sb sandbox, port int) {
	t.Helper()
	const path = "/tmp/app-server.py"
	if _, err := d.c.PutFile(context.Background(), sb.id, sb.token, path, 0o644, strings.NewReader(appServer), int64(len(appServer))); err != nil {
		t.Fatal(err)
	}
	execOK(t, d, sb, fmt.Sprintf("(python3 %s %d >/tmp/app-server.log 2>&1 &) ; "+
		"for i in $(seq 300); do ss -ltn | grep -q ':%d ' && break; sleep 0.1; done; ss -ltn | grep -q ':%d '",
		path, port, port, port))
}

// serveMarker serves, with python3 -m http.server on port inside sb, an
// index.html holding a marker it returns.
func serveMarker(t *testing.T, d *daemon, sb sandbox, port int) string {
	t.Helper()
	marker := "marker-" + randomHex(6)
	dir := fmt.Sprintf("/tmp/www%d", port)
	execOK(t, d, sb, "mkdir -p "+dir+" && echo "+marker+" > "+dir+"/index.html")
	startHTTPServer(t, d, sb, port, dir)
	return marker
}

// previewClient sends every request to d's listener, whatever the URL's
// host (a preview URL's *.localhost): the URL's Host header is what routes
// it. It follows no redirect unless jar is set.
func previewClient(d *daemon, jar http.CookieJar) *http.Client {
	c := &http.Client{
		Timeout: time.Minute,
		Jar:     jar,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, d.addr)
		}},
	}
	if jar == nil {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

// previewGet sends GET u with the headers, through c; a "Host" header
// replaces the URL's host in the request (not in the TLS server name).
func previewGet(t *testing.T, c *http.Client, u string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// portURL is the preview URL of port on sandbox id, for a port not
// exposed (so the API did not return it).
func portURL(d *daemon, id string, port int) string {
	return fmt.Sprintf("http://%d-%s.localhost:%d/", port, id, d.port())
}

// TestExposePort: a server started in the background in a sandbox is
// reached through its preview URL with the token (header, or ?token= that
// sets a cookie), or by E2B's routing headers; without the token it is 401,
// a port nothing listens on is a prompt 502, a port not exposed 404; the
// URL dies with the sandbox.
func TestExposePort(t *testing.T) {
	d := suite.shared
	sb := createNet(t, d, apitype.CreateSandboxRequest{}, nil)[0]
	marker := serveMarker(t, d, sb, 8000)

	pi := exposePort(t, d, sb, 8000, false)
	if want := fmt.Sprintf("http://8000-%s.localhost:%d", sb.id, d.port()); strings.TrimSuffix(pi.URL, "/") != want {
		t.Errorf("preview URL %q, want %q", pi.URL, want)
	}
	if again := exposePort(t, d, sb, 8000, false); again.Token != pi.Token {
		t.Errorf("exposing a port again changed its token")
	}
	c := previewClient(d, nil)
	withToken := map[string]string{previewHeader: pi.Token}
	if resp, body := previewGet(t, c, pi.URL, withToken); resp.StatusCode != http.StatusOK || !strings.Contains(body, marker) {
		t.Errorf("preview with the token: %d %q", resp.StatusCode, body)
	}
	for name, h := range map[string]map[string]string{
		"no token":    nil,
		"a bad token": {previewHeader: randomHex(16)},
	} {
		if resp, body := previewGet(t, c, pi.URL, h); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, marker) {
			t.Errorf("preview with %s: %d %q, want 401", name, resp.StatusCode, body)
		}
	}
	// ?token= sets a cookie by a redirect to the URL without it.
	resp, _ := previewGet(t, c, pi.URL+"?token="+url.QueryEscape(pi.Token), nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || strings.Contains(loc, "token") {
		t.Errorf("?token=: %d to %q, want 302 to the URL without the token", resp.StatusCode, loc)
	}
	cookie := "cove_preview_8000_" + sb.id
	if ck := resp.Cookies(); len(ck) != 1 || ck[0].Name != cookie || !ck[0].HttpOnly {
		t.Errorf("?token= set cookies %v, want one HttpOnly %s", ck, cookie)
	}
	jar, _ := cookiejar.New(nil)
	if resp, body := previewGet(t, previewClient(d, jar), pi.URL+"?token="+url.QueryEscape(pi.Token), nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, marker) {
		t.Errorf("?token= followed with cookies: %d %q", resp.StatusCode, body)
	}
	// E2B's convention: routed by headers, on the daemon's own address.
	e2b := map[string]string{"E2b-Sandbox-Id": sb.id, "E2b-Sandbox-Port": "8000", previewHeader: pi.Token}
	if resp, body := previewGet(t, c, d.url+"/", e2b); resp.StatusCode != http.StatusOK || !strings.Contains(body, marker) {
		t.Errorf("preview by E2B headers: %d %q", resp.StatusCode, body)
	}
	checkPreviewHTTPS(t, d, pi, marker)

	var ports struct {
		Ports []apitype.PortInfo `json:"ports"`
	}
	d.call(t, http.MethodGet, "/v1/sandboxes/"+sb.id+"/ports", sb.token, nil, http.StatusOK, &ports)
	if len(ports.Ports) != 1 || ports.Ports[0].Port != 8000 {
		t.Errorf("GET ports: %+v, want 8000", ports.Ports)
	}
	if got := getNet(t, d, sb.id).Ports; len(got) != 1 || got[0].Port != 8000 {
		t.Errorf("GET sandbox shows ports %+v, want 8000", got)
	}

	// Nothing listens on 8001: a clear 502 at once (public: no token).
	idle := exposePort(t, d, sb, 8001, true)
	t0 := time.Now()
	resp, body := previewGet(t, c, idle.URL, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "8001") || time.Since(t0) > 5*time.Second {
		t.Errorf("a port nothing listens on: %d after %v: %q, want 502 at once naming 8001", resp.StatusCode, time.Since(t0), body)
	}
	if resp, _ := previewGet(t, c, portURL(d, sb.id, 8002), withToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a port not exposed: %d, want 404", resp.StatusCode)
	}
	for _, port := range []int{0, 65536, -1} {
		d.call(t, http.MethodPost, "/v1/sandboxes/"+sb.id+"/ports", sb.token, map[string]any{"port": port}, http.StatusBadRequest, nil)
	}
	d.call(t, http.MethodPost, "/v1/sandboxes/"+sb.id+"/ports", "", map[string]any{"port": 8003}, http.StatusForbidden, nil)

	// Unexposed, the URL is gone; exposed again, it is back; killed, gone.
	d.call(t, http.MethodDelete, "/v1/sandboxes/"+sb.id+"/ports/8000", sb.token, nil, http.StatusNoContent, nil)
	if resp, _ := previewGet(t, c, pi.URL, withToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unexposed port: %d, want 404", resp.StatusCode)
	}
	pi = exposePort(t, d, sb, 8000, false)
	withToken = map[string]string{previewHeader: pi.Token}
	if resp, _ := previewGet(t, c, pi.URL, withToken); resp.StatusCode != http.StatusOK {
		t.Errorf("exposed again: %d, want 200", resp.StatusCode)
	}
	if err := d.c.DeleteSandbox(context.Background(), sb.id); err != nil {
		t.Fatal(err)
	}
	if resp, body := previewGet(t, c, pi.URL, withToken); resp.StatusCode != http.StatusNotFound || strings.Contains(body, marker) {
		t.Errorf("preview of a killed sandbox: %d, want 404", resp.StatusCode)
	}
}

// checkPreviewHTTPS: the shared daemon's HTTPS listener, asked for port 0,
// reports its real port and its CA in /v1/info; pi's https_url serves the
// page to clients trusting only that CA, Go's and curl's (OpenSSL refuses
// more for *.localhost), with the token and not without; a host that is
// no preview URL is 404 there, the API key notwithstanding.
func checkPreviewHTTPS(t *testing.T, d *daemon, pi apitype.PortInfo, marker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := d.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := info.Network
	if n.PreviewHTTPSPort == 0 || n.PreviewCA == "" {
		t.Fatalf("/v1/info network %+v: want the HTTPS listener's port and CA", n)
	}
	u, err := url.Parse(pi.HTTPSURL)
	plain, _ := url.Parse(pi.URL)
	if err != nil || u.Scheme != "https" || u.Hostname() != plain.Hostname() || u.Port() != strconv.Itoa(n.PreviewHTTPSPort) {
		t.Fatalf("https_url %q (%v), want %s's host on port %d", pi.HTTPSURL, err, pi.URL, n.PreviewHTTPSPort)
	}
	caPEM, err := os.ReadFile(n.PreviewCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", n.PreviewCA)
	}
	addr := net.JoinHostPort("127.0.0.1", u.Port())
	c := &http.Client{
		Timeout:       time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, network, addr)
			},
		},
	}
	withToken := map[string]string{previewHeader: pi.Token}
	if resp, body := previewGet(t, c, pi.HTTPSURL, withToken); resp.StatusCode != http.StatusOK || !strings.Contains(body, marker) {
		t.Errorf("https_url with the token: %d %q", resp.StatusCode, body)
	}
	if resp, body := previewGet(t, c, pi.HTTPSURL, nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, marker) {
		t.Errorf("https_url without the token: %d %q, want 401", resp.StatusCode, body)
	}
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--fail-with-body", "--cacert", n.PreviewCA,
		"--resolve", u.Host+":127.0.0.1", "-H", previewHeader+": "+pi.Token, pi.HTTPSURL).CombinedOutput()
	if err != nil || !strings.Contains(string(out), marker) {
		t.Errorf("curl --cacert %s %s: %v: %q", n.PreviewCA, pi.HTTPSURL, err, out)
	}

	// Not a preview host: the preview domain itself, and the API's own
	// address as Host; not a door to the API whatever the path.
	api := map[string]string{"Authorization": "Bearer " + d.key}
	apiHost := map[string]string{"Authorization": "Bearer " + d.key, "Host": d.addr}
	base := "https://" + net.JoinHostPort(n.PreviewDomain, u.Port())
	for _, r := range []struct {
		path    string
		headers map[string]string
	}{{"/v1/info", api}, {"/v1/sandboxes", api}, {"/healthz", api}, {"/v1/info", apiHost}, {"/", apiHost}} {
		resp, body := previewGet(t, c, base+r.path, r.headers)
		if resp.StatusCode != http.StatusNotFound || strings.HasPrefix(strings.TrimSpace(body), "{") || strings.Contains(body, marker) {
			t.Errorf("GET %s%s (Host %s) on the HTTPS listener: %d %q, want a bare 404", base, r.path, cmp.Or(r.headers["Host"], "its own"), resp.StatusCode, body)
		}
	}
}

// TestPreviewStreamWebSocketBrowser: through a preview URL, a streamed
// response arrives as it is written, a WebSocket echo round-trips, and
// headless Chromium loads the sandbox's page (?token=, then its cookie)
// and shows it.
func TestPreviewStreamWebSocketBrowser(t *testing.T) {
	d := suite.shared
	sb := createNet(t, d, apitype.CreateSandboxRequest{}, nil)[0]
	startAppServer(t, d, sb, 8080)
	pi := exposePort(t, d, sb, 8080, false)
	base := strings.TrimSuffix(pi.URL, "/")
	c := previewClient(d, nil)

	// Streaming: the first chunk comes a second or more before the end.
	req, _ := http.NewRequest(http.MethodGet, base+"/stream", nil)
	req.Header.Set(previewHeader, pi.Token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	t0 := time.Now()
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || first != "chunk 0\n" || !strings.Contains(string(rest), "chunk 2") {
		t.Errorf("stream: %q then %q (%v)", first, rest, err)
	} else if wait := time.Since(t0); wait < time.Second {
		t.Errorf("stream: the rest came %v after the first chunk, want ~2 s: the response was buffered", wait)
	}

	// WebSocket echo.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, wsResp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{
		HTTPClient: previewClient(d, nil),
		HTTPHeader: http.Header{previewHeader: {pi.Token}},
	})
	if err != nil {
		t.Fatalf("WebSocket through the preview URL: %v (%+v)", err, wsResp)
	}
	ws.SetReadLimit(1 << 20)
	for _, msg := range []string{"hello-" + randomHex(4), strings.Repeat("x", 70000)} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != msg {
			t.Errorf("WebSocket echo of %d bytes: %d bytes back, %v", len(msg), len(got), err)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")

	screenshotShows(t, base+"/?token="+url.QueryEscape(pi.Token), pageColour)
}

// chromium is Debian's Chromium.
const chromium = "/usr/bin/chromium"

// screenshotShows loads u in headless Chromium and checks that the middle
// of its screenshot is colour. Without Chromium it skips, but fails
// under CI.
func screenshotShows(t *testing.T, u string, colour [3]uint8) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it for the e2e suite)", chromium)
		}
		t.Skipf("%s is missing: no browser check", chromium)
	}
	dir := t.TempDir()
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=800,600", u)
	out, err := cmd.CombinedOutput()
	f, ferr := os.Open(shot)
	if err != nil || ferr != nil {
		t.Fatalf("chromium: %v %v:\n%s", err, ferr, lastLines(string(out)))
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	r, g, bl, _ := img.At((b.Min.X+b.Max.X)/2, (b.Min.Y+b.Max.Y)/2).RGBA()
	got := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}
	near := func(a, b uint8) bool { return max(a, b)-min(a, b) <= 8 }
	if !near(got[0], colour[0]) || !near(got[1], colour[1]) || !near(got[2], colour[2]) {
		t.Errorf("the screenshot's middle is %v, want the page's %v: the page did not load (%dx%d)", got, colour, b.Dx(), b.Dy())
	}
}

// TestPortForward: the connect tunnel reaches a port from the host
// without the preview proxy, raw (REST: 101 Upgrade: cove-tcp) and
// through `cove port-forward`.
func TestPortForward(t *testing.T) {
	d := suite.shared
	sb := createNet(t, d, apitype.CreateSandboxRequest{}, nil)[0]
	marker := serveMarker(t, d, sb, 8000)

	// The tunnel itself: bytes both ways after a 101.
	conn := connectTunnel(t, d, sb, 8000)
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(b), "200") || !strings.Contains(string(b), marker) {
		t.Errorf("through the connect tunnel: %q", b)
	}
	status, _ := rawCall(t, http.MethodGet, d.url+"/v1/sandboxes/"+sb.id+"/ports/8000/connect",
		map[string]string{"Authorization": "Bearer " + d.key, "Connection": "Upgrade", "Upgrade": "cove-tcp"}, "")
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		t.Errorf("connect without the sandbox token: %d, want 401 or 403", status)
	}

	// cove port-forward LOCAL:REMOTE.
	local, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, lport, _ := net.SplitHostPort(local)
	cmd := exec.Command(suite.bin, "port-forward", sb.id, lport+":8000")
	cmd.Env = append(os.Environ(), "COVE_URL="+d.url, "COVE_API_KEY="+d.key, "COVE_SANDBOX_TOKEN="+sb.token)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://127.0.0.1:" + lport + "/")
		if err != nil {
			continue
		}
		bb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(bb)
		break
	}
	if !strings.Contains(body, marker) {
		t.Errorf("through cove port-forward: %q; its output:\n%s", body, out.String())
	}
}

// connectTunnel opens the connect tunnel to port on sb.
func connectTunnel(t *testing.T, d *daemon, sb sandbox, port int) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", d.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/ports/%d/connect HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s: %s\r\nConnection: Upgrade\r\nUpgrade: cove-tcp\r\n\r\n",
		sb.id, port, d.addr, d.key, apitype.SandboxTokenHeader, sb.token)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("connect: %d %s", resp.StatusCode, b)
	}
	return &bufferedConn{conn, br}
}

// bufferedConn reads what its reader already buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
