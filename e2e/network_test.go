package e2e

// Egress policy end to end: every server a sandbox is let reach, or kept
// from, is a test server of suite.net (a namespace on this machine) or an
// address of this host. No probe names a public address, so a wrong rule
// sends nothing off the machine.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func webURL(scheme string, a netip.Addr) string { return scheme + "://" + a.String() + "/" }

// banner is the start of what the test server at a answers.
func banner(a netip.Addr) string { return testnet.Banner + " " + a.String() + " " }

func cidr(a netip.Addr) string { return netip.PrefixFrom(a, 32).String() }

// hostListener listens on every address of the host's namespace and
// answers HTTP: a sandbox that reaches it has reached the host.
func hostListener(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "host-listener")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// hostAddrs returns the host namespace's own unicast addresses, IPv4 and
// IPv6, but loopback and link-local ones (a sandbox's loopback is its own).
func hostAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		// Other runs' test networks come and go: only this one's.
		if o := p.Addr(); o.Is4() && o.As4()[0] == 10 && o.As4()[1] == 99 && o != suite.net.HostAddr {
			continue
		}
		out = append(out, p.Addr())
	}
	if len(out) < 2 {
		t.Fatalf("host addresses %v: want at least the test network's and one more", out)
	}
	return out
}

func (d *daemon) port() int {
	_, p, _ := net.SplitHostPort(d.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// hostCases are probes of the host's own addresses: the daemon's API
// port and a listener on every address.
func hostCases(t *testing.T, d *daemon, why string) []probeCase {
	listener := hostListener(t)
	var cases []probeCase
	for _, a := range hostAddrs(t) {
		for _, port := range []int{d.port(), listener} {
			u := "http://" + net.JoinHostPort(a.String(), strconv.Itoa(port)) + "/"
			cases = append(cases, probeCase{httpGet(u), refused, "", why + ": the host's address " + a.String()})
		}
	}
	return cases
}

// TestNetworkDeny: a sandbox made without a policy reaches nothing: not a
// test server, not the daemon's API or the host's addresses, not another
// sandbox, not the metadata address; and no name resolves. Opening every
// address (0.0.0.0/0) or the test network's range still leaves the host,
// the link and private ranges the CIDR does not name out of reach.
func TestNetworkDeny(t *testing.T) {
	d, tn := suite.shared, suite.net
	sbs := createNet(t, d, apitype.CreateSandboxRequest{N: 2}, nil)
	a, b := sbs[0], sbs[1]
	if p := getNet(t, d, a.id).Network; !samePolicy(p, apitype.NetworkPolicy{}) {
		t.Errorf("a sandbox made without a policy has %+v, want none (deny)", p)
	}
	// b serves a port, exposed through the daemon: a must not reach it.
	startHTTPServer(t, d, b, 8000, "/tmp")
	exposePort(t, d, b, 8000, true)
	api := d.port()
	queries := tn.Queries(testnet.AllowedName)

	cases := []probeCase{
		{httpGet(webURL("http", tn.Allowed)), refused, "", "the test server"},
		{httpGet(webURL("https", tn.Allowed), "-k"), refused, "", "the test server over TLS"},
		{tcpEcho(tn.Allowed, testnet.EchoPort), refused, "", "the test server's TCP echo"},
		{udpEcho(tn.Allowed), unanswer, "", "the test server's UDP echo"},
		{probe{Kind: "resolve", Name: testnet.AllowedName}, refused, "", "a name of the zone"},
		{httpGet(fmt.Sprintf("http://%s:%d/healthz", "10.77.0.1", api)), refused, "", "the daemon's API port at the link's host end"},
		{httpGet(fmt.Sprintf("http://127.0.0.1:%d/healthz", api)), refused, "", "the daemon's API port on loopback (the sandbox's own)"},
		{httpGet("http://169.254.169.254/latest/meta-data/"), refused, "", "the metadata address"},
		{httpGet("http://10.77.0.1:8000/"), refused, "", "another sandbox's port at the link's host end"},
		{httpGet(fmt.Sprintf("http://10.77.0.1:%d/", api), "-H", "Host: 8000-"+b.id+".localhost"), refused, "", "another sandbox's preview URL"},
	}
	cases = append(cases, hostCases(t, d, "deny")...)
	check(t, d, a, cases...)
	if got := tn.Queries(testnet.AllowedName); got != queries {
		t.Errorf("the zone server saw %d queries for %s from a sandbox that may resolve nothing", got-queries, testnet.AllowedName)
	}

	// Everything by CIDR: the host, the link and private ranges stay shut.
	setNetwork(t, d, a.id, apitype.NetworkPolicy{AllowCIDRs: []string{"0.0.0.0/0"}})
	cases = []probeCase{
		{httpGet(webURL("http", tn.Allowed)), refused, "", "0.0.0.0/0: a private address no CIDR inside its range names"},
		{tcpEcho(tn.Other, testnet.EchoPort), refused, "", "0.0.0.0/0: a private address's echo"},
		{httpGet(fmt.Sprintf("http://10.77.0.1:%d/healthz", api)), refused, "", "0.0.0.0/0: the link's host end"},
	}
	cases = append(cases, hostCases(t, d, "0.0.0.0/0")...)
	check(t, d, a, cases...)

	// The test network's range: its servers answer; the host's address
	// inside it does not, nor does UDP.
	setNetwork(t, d, a.id, apitype.NetworkPolicy{AllowCIDRs: []string{tn.Prefix.String()}})
	listener := hostListener(t)
	check(t, d, a,
		probeCase{httpGet(webURL("http", tn.Allowed)), reach, banner(tn.Allowed), "the range allowed"},
		probeCase{tcpEcho(tn.Other, testnet.EchoPort), reach, "", "the range allowed: echo"},
		probeCase{udpEcho(tn.Other), unanswer, "", "the range allowed: UDP"},
		probeCase{httpGet(fmt.Sprintf("http://%s:%d/", tn.HostAddr, listener)), refused, "", "the host's address inside an allowed range"},
		probeCase{httpGet(fmt.Sprintf("http://%s:%d/healthz", tn.HostAddr, api)), refused, "", "the daemon's port on the host's address inside an allowed range"},
		// Port 53 is cove's resolver whatever the address: the zone
		// server, in the allowed range, is never asked.
		probeCase{probe{Kind: "dns", Host: tn.DNS.Addr().String(), Name: testnet.ForbiddenName}, reach, "", "a query sent to the zone server itself"},
	)
	if got := tn.Queries(testnet.ForbiddenName); got != 0 {
		t.Errorf("the zone server saw %d queries for %s", got, testnet.ForbiddenName)
	}
}

func udpEcho(a netip.Addr) probe {
	return probe{Kind: "udp", Host: a.String(), Port: testnet.EchoPort, Send: "udp-" + randomHex(4)}
}

// startHTTPServer starts python3 -m http.server on port in dir inside sb,
// in the background, and waits until it listens.
func startHTTPServer(t *testing.T, d *daemon, sb sandbox, port int, dir string) {
	t.Helper()
	execOK(t, d, sb, fmt.Sprintf("cd %s && (python3 -m http.server %d >/dev/null 2>&1 &) ; "+
		"for i in $(seq 300); do ss -ltn | grep -q ':%d ' && break; sleep 0.1; done; ss -ltn | grep -q ':%d '",
		dir, port, port, port))
}

// TestNetworkCIDR: an allowed address answers and another does not; PUT
// network on the running sandbox flips that both ways without restarting
// it, and a bad policy changes nothing.
func TestNetworkCIDR(t *testing.T) {
	d, tn := suite.shared, suite.net
	p := apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Allowed)}}
	sb := createNet(t, d, apitype.CreateSandboxRequest{}, &p)[0]
	if got := getNet(t, d, sb.id).Network; !samePolicy(got, p) {
		t.Fatalf("GET shows %+v, want %+v", got, p)
	}
	pid := strings.TrimSpace(execOK(t, d, sb, "sleep 3600 >/dev/null 2>&1 & echo $!"))

	check(t, d, sb,
		probeCase{httpGet(webURL("http", tn.Allowed)), reach, banner(tn.Allowed), "allowed"},
		probeCase{httpGet(webURL("https", tn.Allowed), "-k"), reach, banner(tn.Allowed), "allowed, TLS"},
		probeCase{tcpEcho(tn.Allowed, testnet.EchoPort), reach, "", "allowed, echo"},
		probeCase{udpEcho(tn.Allowed), unanswer, "", "allowed, but UDP"},
		probeCase{httpGet(webURL("http", tn.Other)), refused, "", "not allowed"},
		probeCase{tcpEcho(tn.Other, testnet.EchoPort), refused, "", "not allowed, echo"},
	)

	flipped := apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Other)}}
	if got := setNetwork(t, d, sb.id, flipped).Network; !samePolicy(got, flipped) {
		t.Errorf("PUT network answered %+v, want %+v", got, flipped)
	}
	check(t, d, sb,
		probeCase{httpGet(webURL("http", tn.Allowed)), refused, "", "no longer allowed"},
		probeCase{httpGet(webURL("http", tn.Other)), reach, banner(tn.Other), "now allowed"},
	)

	// A deny CIDR on top of an allowed range.
	setNetwork(t, d, sb.id, apitype.NetworkPolicy{AllowCIDRs: []string{tn.Prefix.String()}, DenyCIDRs: []string{cidr(tn.Other)}})
	check(t, d, sb,
		probeCase{httpGet(webURL("http", tn.Allowed)), reach, banner(tn.Allowed), "in the allowed range"},
		probeCase{httpGet(webURL("http", tn.Other)), refused, "", "in the allowed range, but denied"},
	)

	// Back to deny; a bad policy is refused and changes nothing.
	setNetwork(t, d, sb.id, apitype.NetworkPolicy{})
	for _, bad := range []apitype.NetworkPolicy{
		{AllowCIDRs: []string{"not-a-cidr"}},
		{AllowCIDRs: []string{"10.99.0.0/33"}},
		{AllowDomains: []string{"exa mple.org"}},
		{Presets: []string{"no-such-preset-" + randomHex(3)}},
	} {
		d.call(t, http.MethodPut, "/v1/sandboxes/"+sb.id+"/network", "", bad, http.StatusBadRequest, nil)
	}
	if got := getNet(t, d, sb.id).Network; !samePolicy(got, apitype.NetworkPolicy{}) {
		t.Errorf("after bad policies GET shows %+v, want deny", got)
	}
	check(t, d, sb,
		probeCase{httpGet(webURL("http", tn.Allowed)), refused, "", "denied again"},
		probeCase{httpGet(webURL("http", tn.Other)), refused, "", "denied again"},
	)
	// The same sandbox all along: what it started still runs.
	execOK(t, d, sb, "kill -0 "+pid)
	status, _ := rawCall(t, http.MethodPut, d.url+"/v1/sandboxes/no-such-sandbox/network",
		map[string]string{"Authorization": "Bearer " + d.key}, `{}`)
	if status != http.StatusNotFound {
		t.Errorf("PUT network of an unknown sandbox: %d, want 404", status)
	}
}

// TestNetworkDomains: allowed names resolve and connect, by Host over HTTP
// and by SNI over TLS (with the test CA in the sandbox); other names do
// not resolve and are never asked of the zone server; a raw IP, or a name
// not allowed pointed at an allowed name's address, is refused.
func TestNetworkDomains(t *testing.T) {
	d, tn := suite.shared, suite.net
	p := apitype.NetworkPolicy{AllowDomains: []string{testnet.AllowedName, "*.wild.test"}, DenyDomains: []string{testnet.ForbiddenName}}
	sb := createNet(t, d, apitype.CreateSandboxRequest{}, &p)[0]
	if got := getNet(t, d, sb.id).Network; !samePolicy(got, p) {
		t.Fatalf("GET shows %+v, want %+v", got, p)
	}
	const ca = "/tmp/testnet-ca.pem"
	if _, err := d.c.PutFile(context.Background(), sb.id, sb.token, ca, 0o644, strings.NewReader(string(tn.CA.PEM)), int64(len(tn.CA.PEM))); err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for name := range tn.Zone() {
		before[name] = tn.Queries(name)
	}
	resolve := func(name string, family int) probe { return probe{Kind: "resolve", Name: name, Family: family} }
	pin := func(name string, port int, a netip.Addr) []string {
		return []string{"--cacert", ca, "--resolve", fmt.Sprintf("%s:%d:%s", name, port, a)}
	}
	allowedHTTPS := "https://" + testnet.AllowedName + "/"

	check(t, d, sb,
		probeCase{resolve(testnet.AllowedName, 4), reach, tn.Allowed.String(), "an allowed name"},
		probeCase{resolve(testnet.AllowedName, 6), refused, "", "an allowed name's IPv6 address (there is none)"},
		probeCase{httpGet("http://" + testnet.AllowedName + "/"), reach, banner(tn.Allowed) + "host=" + testnet.AllowedName, "an allowed name by Host"},
		probeCase{httpGet(allowedHTTPS, "--cacert", ca), reach, "sni=" + testnet.AllowedName, "an allowed name by SNI"},
		probeCase{resolve(testnet.ForbiddenName, 4), refused, "", "a denied name"},
		probeCase{resolve(testnet.OtherName, 4), refused, "", "a name not allowed"},
		probeCase{httpGet(webURL("http", tn.Allowed)), refused, "", "a raw IP an allowed name resolved to"},
		probeCase{httpGet(webURL("http", tn.Other)), refused, "", "a raw IP"},
		probeCase{tcpEcho(tn.Other, testnet.EchoPort), refused, "", "another port of an address no allowed name resolved to"},
		probeCase{tcpEcho(tn.Allowed, testnet.EchoPort), reach, "", "another port of an address an allowed name resolved to"},
		probeCase{httpGet("https://"+testnet.ForbiddenName+"/", pin(testnet.ForbiddenName, 443, tn.Allowed)...), refused, "", "a denied name at an allowed address, by SNI"},
		probeCase{httpGet("http://"+testnet.ForbiddenName+"/", pin(testnet.ForbiddenName, 80, tn.Allowed)...), refused, "", "a denied name at an allowed address, by Host"},
		probeCase{httpGet("https://"+testnet.OtherName+"/", pin(testnet.OtherName, 443, tn.Allowed)...), refused, "", "a name not allowed at an allowed address"},
		probeCase{httpGet(allowedHTTPS, pin(testnet.AllowedName, 443, tn.Other)...), refused, "", "an allowed name at an address it did not resolve to"},
		probeCase{httpGet("http://"+tn.Other.String()+"/", "-H", "Host: "+testnet.AllowedName), refused, "", "an allowed Host at an address it did not resolve to"},
	)
	check(t, d, sb,
		probeCase{resolve(testnet.WildName, 4), reach, tn.Other.String(), "a name under an allowed wildcard"},
		probeCase{httpGet("http://" + testnet.WildName + "/"), reach, banner(tn.Other) + "host=" + testnet.WildName, "a name under an allowed wildcard by Host"},
	)
	// A query sent past the resolver is answered by cove all the same.
	r := runProbes(t, d, sb, probe{Kind: "dns", Host: tn.DNS.Addr().String(), Name: testnet.ForbiddenName})[0]
	if !r.OK || r.Rcode != 3 {
		t.Errorf("a query for %s sent to the zone server's address: %+v, want NXDOMAIN (rcode 3) from cove", testnet.ForbiddenName, r)
	}

	// Two names on one address: the allowed one connects, the denied
	// one does not.
	shared := apitype.NetworkPolicy{AllowDomains: []string{testnet.AllowedName, testnet.SharedName}, DenyDomains: []string{testnet.ForbiddenName}}
	setNetwork(t, d, sb.id, shared)
	check(t, d, sb,
		probeCase{resolve(testnet.SharedName, 4), reach, tn.Allowed.String(), "a name allowed now"},
		probeCase{httpGet("https://"+testnet.SharedName+"/", "--cacert", ca), reach, "sni=" + testnet.SharedName, "a name allowed now, by SNI"},
		probeCase{httpGet("https://"+testnet.ForbiddenName+"/", pin(testnet.ForbiddenName, 443, tn.Allowed)...), refused, "", "a denied name at the address of an allowed one"},
		probeCase{resolve("b.wild.test", 4), refused, "", "a name under a wildcard no longer allowed"},
	)

	for name, n := range before {
		got := tn.Queries(name) - n
		switch name {
		case testnet.AllowedName, testnet.WildName, testnet.SharedName:
			if got == 0 {
				t.Errorf("the zone server saw no query for %s: was it answered without asking upstream?", name)
			}
		default:
			if got != 0 {
				t.Errorf("the zone server saw %d queries for %s, which the policy does not allow", got, name)
			}
		}
	}
	if got := tn.Queries("b.wild.test"); got != 0 {
		t.Errorf("the zone server saw %d queries for b.wild.test", got)
	}
}
