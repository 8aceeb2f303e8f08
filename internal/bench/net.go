package bench

// The network benchmarks: egress throughput through cove's proxy beside
// the host's own download from the same test server, a preview URL's
// request latency beside a request straight to the sandbox's port, and the
// in-guest latency of a name cove's resolver answers beside one in
// /etc/hosts. Every server is the bench's own (internal/testnet), in a
// namespace on this host.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// netWanted reports whether any network benchmark is to run.
func (o *Options) netWanted() bool { return o.EgressMiB > 0 || o.PreviewGets > 0 || o.DNSLookups > 0 }

// StartNet starts the test network the network benchmarks use, if any is
// to run, and returns the flags of `cove serve` that make a daemon the
// bench starts resolve names through its zone. CloseNet closes it.
func (o *Options) StartNet(ctx context.Context) ([]string, error) {
	if !o.netWanted() || o.Net != nil {
		return nil, nil
	}
	tn, err := testnet.Start(ctx, testnet.Config{Base: "cove-bench"})
	if err != nil {
		return nil, err
	}
	o.Net, o.ZoneUpstream = tn, true
	return []string{"--dns-upstream", tn.DNS.String(), "--resolvable-private", tn.Prefix.String()}, nil
}

// CloseNet closes the test network StartNet started.
func (o *Options) CloseNet() {
	if o.Net != nil {
		o.Net.Close()
	}
}

// netSample is the number of downloads the egress row times.
const netSample = 3

// appPort is where the sandbox's HTTP server listens.
const appPort = 8000

// keepAliveServer answers GET with a small body over HTTP/1.1 keep-alive,
// so that a request's latency is the path's, not a connection's set-up.
// It writes each answer at once: headers and body written apart meet
// Nagle's algorithm in the guest and a delayed ACK on the host, ~40 ms a
// request on every path (direct too), which would hide the paths' costs.
const keepAliveServer = `import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16
    def log_message(self, *a):
        pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
`

// runNet runs the network benchmarks in one sandbox whose policy allows
// the test network's allowed server, by address and by name.
func (b *bencher) runNet(ctx context.Context, info apitype.Info, add func(result)) {
	tn := b.o.Net
	if tn == nil {
		var err error
		if tn, err = testnet.Start(ctx, testnet.Config{Base: "cove-bench"}); err != nil {
			b.failNet(add, fmt.Errorf("test network: %w", err))
			return
		}
		defer tn.Close()
	}
	policy := &apitype.NetworkPolicy{AllowCIDRs: []string{netip.PrefixFrom(tn.Allowed, 32).String()},
		AllowDomains: []string{testnet.AllowedName}}
	sb, err := b.createOne(ctx, info, apitype.CreateSandboxRequest{Network: policy})
	if err != nil {
		b.failNet(add, fmt.Errorf("create the network sandbox: %w", err))
		return
	}
	defer b.destroy(ctx, sb.ID)
	b.logf("network sandbox %s, test servers at %s", sb.ID, tn.Prefix)
	if b.o.EgressMiB > 0 {
		add(b.benchEgress(ctx, sb, tn))
	}
	if b.o.PreviewGets > 0 {
		for _, r := range b.benchPreview(ctx, info, sb) {
			add(r)
		}
	}
	switch {
	case b.o.DNSLookups > 0 && b.o.ZoneUpstream:
		add(b.benchDNS(ctx, sb, tn))
	case b.o.DNSLookups > 0:
		b.logf("dns: skipped, it needs the daemon to resolve through the bench's test zone: only one the bench starts (--backend) does")
	}
}

func (b *bencher) failNet(add func(result), err error) {
	if b.o.EgressMiB > 0 {
		add(failedResult("egress", unitMBps, err))
	}
	if b.o.PreviewGets > 0 {
		add(failedResult("preview_request", unitMs, err))
		add(failedResult("tunnel_request", unitMs, err))
	}
	if b.o.DNSLookups > 0 && b.o.ZoneUpstream {
		add(failedResult("dns_lookup", unitMs, err))
	}
}

// guestRun runs a shell command in sb and returns its stdout.
func (b *bencher) guestRun(ctx context.Context, sb apitype.SandboxInfo, args ...string) (string, error) {
	res, err := b.cl.Exec(ctx, sb.ID, sb.Token, apitype.ExecRequest{Args: args, TimeoutSecs: 600})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%s: exit %d: %s", args[0], res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return res.Stdout, err
}

// benchEgress downloads EgressMiB from the allowed test server inside the
// sandbox (through cove's proxy; curl's own timing) and from the host,
// netSample times each.
func (b *bencher) benchEgress(ctx context.Context, sb apitype.SandboxInfo, tn *testnet.Net) result {
	size := int64(b.o.EgressMiB) << 20
	url := fmt.Sprintf("http://%s/bytes?n=%d", tn.Allowed, size)
	var guest, host []float64
	for range netSample {
		out, err := b.guestRun(ctx, sb, "curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{time_total}", url)
		if err != nil {
			return failedResult("egress", unitMBps, err)
		}
		var n int64
		var secs float64
		if _, err := fmt.Sscan(out, &n, &secs); err != nil || n != size || secs <= 0 {
			return failedResult("egress", unitMBps, fmt.Errorf("curl in the sandbox: %q (%v), want %d bytes", out, err, size))
		}
		guest = append(guest, float64(n)/1e6/secs)

		t0 := time.Now()
		n, err = hostDownload(ctx, url)
		d := time.Since(t0)
		if err != nil {
			return failedResult("egress", unitMBps, fmt.Errorf("from the host: %w", err))
		}
		host = append(host, float64(n)/1e6/d.Seconds())
	}
	r := rateSamples("egress", guest)
	bl := rateSamples("host", host)
	r.Baseline = &baseline{Name: "host → test server, direct", P50: bl.P50, P99: bl.P99, N: bl.N}
	b.logf("egress: %.1f MB/s through cove's proxy, %.1f MB/s from the host", r.P50, bl.P50)
	return r
}

// rateSamples summarizes rates (MB/s). A rate's tail is its low end, so
// its P99 is the rate 99% of the samples reach: the 1st percentile.
func rateSamples(name string, rates []float64) result {
	sorted := slices.Sorted(slices.Values(rates))
	return result{Name: name, Unit: unitMBps, N: len(sorted),
		P50: round3(percentile(sorted, 50)), P99: round3(percentile(sorted, 1))}
}

func hostDownload(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return copyBlocks(io.Discard, resp.Body)
}

// benchPreview times PreviewGets requests to a server in the sandbox
// through its preview URL and as many through the connect tunnel, each
// beside requests over a connection dialled from the sandbox's own
// namespace as the preview proxy dials it (no proxy at all). Every client
// keeps its connection alive, so each is a request's cost, not a dial's.
func (b *bencher) benchPreview(ctx context.Context, info apitype.Info, sb apitype.SandboxInfo) []result {
	fail := func(err error) []result {
		return []result{failedResult("preview_request", unitMs, err), failedResult("tunnel_request", unitMs, err)}
	}
	const path = "/tmp/cove-bench-server.py"
	if _, err := b.cl.PutFile(ctx, sb.ID, sb.Token, path, 0o644, strings.NewReader(keepAliveServer), int64(len(keepAliveServer))); err != nil {
		return fail(err)
	}
	port := strconv.Itoa(appPort)
	if _, err := b.guestRun(ctx, sb, "sh", "-c", "(python3 "+path+" "+port+" >/dev/null 2>&1 &); "+
		"for i in $(seq 300); do ss -ltn | grep -q ':"+port+" ' && exit 0; sleep 0.1; done; exit 1"); err != nil {
		return fail(fmt.Errorf("start the sandbox's server: %w", err))
	}
	pi, err := b.cl.ExposePort(ctx, sb.ID, sb.Token, appPort, false)
	if err != nil {
		return fail(fmt.Errorf("expose: %w", err))
	}
	daemon := strings.TrimPrefix(strings.TrimPrefix(b.cl.BaseURL(), "http://"), "https://")
	ns := hostNetns(info.Backend, sb.ID)
	clients := map[string]*http.Client{
		"preview": keepAliveClient(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", daemon)
		}),
		"tunnel": keepAliveClient(func(ctx context.Context) (net.Conn, error) {
			return b.cl.DialPort(ctx, sb.ID, sb.Token, appPort)
		}),
		"direct": keepAliveClient(func(ctx context.Context) (net.Conn, error) {
			return netns.Dial(ctx, ns, net.JoinHostPort(netns.GuestIP, port))
		}),
	}
	urls := map[string]string{"preview": pi.URL, "tunnel": "http://sandbox/", "direct": "http://sandbox/"}
	lat := map[string][]time.Duration{}
	// Interleaved, so that the machine's other load falls on all alike.
	for _, name := range []string{"direct", "preview", "tunnel"} {
		for range 10 {
			if _, err := get(ctx, clients[name], urls[name], pi.Token); err != nil {
				return fail(fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	for range b.o.PreviewGets {
		for _, name := range []string{"direct", "preview", "tunnel"} {
			d, err := get(ctx, clients[name], urls[name], pi.Token)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", name, err))
			}
			lat[name] = append(lat[name], d)
		}
	}
	direct := latencyResult("direct", lat["direct"])
	bl := &baseline{Name: "direct to the sandbox's port", P50: direct.P50, P99: direct.P99, N: direct.N}
	var out []result
	for _, name := range []string{"preview", "tunnel"} {
		r := latencyResult(name+"_request", lat[name])
		r.Baseline = bl
		b.logf("%s request: p50 %.2f ms, direct %.2f ms", name, r.P50, bl.P50)
		out = append(out, r)
	}
	return out
}

// hostNetns is the namespace of the host end of a sandbox's link, where
// its ports are dialled (the runtime's Netns).
func hostNetns(backend, id string) string {
	if backend == "qemu" {
		return netns.Name(id, "v")
	}
	return netns.Name(id, "h")
}

func keepAliveClient(dial func(context.Context) (net.Conn, error)) *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 1,
	}}
}

// get sends one GET and reads the answer, and returns how long it took.
func get(ctx context.Context, c *http.Client, url, token string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Cove-Preview-Token", token)
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err == nil && (resp.StatusCode != http.StatusOK || string(body) != "ok\n") {
		err = fmt.Errorf("answer %d %q", resp.StatusCode, body)
	}
	return d, err
}

// dnsScript times lookups of a name, in the sandbox, each one A query
// (AF_INET) through the C library's resolver.
const dnsScript = `import json, socket, sys, time
name, n = sys.argv[1], int(sys.argv[2])
out = []
for i in range(n + 5):
    t0 = time.perf_counter()
    socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)
    if i >= 5:
        out.append((time.perf_counter() - t0) * 1000)
print(json.dumps(out))
`

// benchDNS times DNSLookups in-guest lookups of the allowed name, which
// cove's resolver forwards to the test zone, beside lookups of a name in
// /etc/hosts (no DNS at all).
func (b *bencher) benchDNS(ctx context.Context, sb apitype.SandboxInfo, tn *testnet.Net) result {
	const hostsName = "hosts-bench.test"
	if _, err := b.guestRun(ctx, sb, "sh", "-c", fmt.Sprintf("echo '%s %s' >> /etc/hosts", tn.Allowed, hostsName)); err != nil {
		return failedResult("dns_lookup", unitMs, err)
	}
	lookups := func(name string) ([]float64, error) {
		out, err := b.guestRun(ctx, sb, "python3", "-c", dnsScript, name, strconv.Itoa(b.o.DNSLookups))
		if err != nil {
			return nil, err
		}
		var ms []float64
		if err := json.Unmarshal([]byte(out), &ms); err != nil || len(ms) != b.o.DNSLookups {
			return nil, fmt.Errorf("lookups of %s: %q (%v)", name, out, err)
		}
		return ms, nil
	}
	dns, err := lookups(testnet.AllowedName)
	if err != nil {
		return failedResult("dns_lookup", unitMs, err)
	}
	hosts, err := lookups(hostsName)
	if err != nil {
		return failedResult("dns_lookup", unitMs, err)
	}
	r := msResult("dns_lookup", dns)
	h := msResult("hosts", hosts)
	r.Baseline = &baseline{Name: "/etc/hosts", P50: h.P50, P99: h.P99, N: h.N}
	b.logf("dns lookup: p50 %.2f ms, /etc/hosts %.2f ms", r.P50, h.P50)
	return r
}
