package testnet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cove-sandbox/cove/internal/netns"
)

func TestParseRoutes(t *testing.T) {
	out := `default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
local 192.0.2.2 dev eth0 table local proto kernel scope host src 192.0.2.2
broadcast 10.99.7.255 dev x table local proto kernel scope link src 10.99.7.1
unreachable 10.0.0.0/8 metric 1024
10.99.40.1 dev y scope link
`
	got, err := parseRoutes([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"192.0.2.0/24", "192.0.2.2/32", "10.99.7.255/32", "10.0.0.0/8", "10.99.40.1/32"}
	var s []string
	for _, p := range got {
		s = append(s, p.String())
	}
	if !slices.Equal(s, want) {
		t.Errorf("parseRoutes = %v, want %v", s, want)
	}
	if _, err := parseRoutes([]byte("nonsense dev eth0\n")); err == nil {
		t.Error("a line without a destination parsed")
	}
	p := netip.MustParsePrefix("10.99.7.0/24")
	if !overlapsAny(p, got) {
		t.Error("10.99.7.0/24 does not overlap 10.0.0.0/8")
	}
	if overlapsAny(netip.MustParsePrefix("10.99.7.0/24"), got[:2]) {
		t.Error("10.99.7.0/24 overlaps 192.0.2.0/24")
	}
}

func TestStalePid(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"cove-e2e123-srv45", 123, true},
		{"cove-e2e123-srv", 0, false},
		{"cove-e2e-srv45", 0, false},
		{"cove-bench123-srv45", 0, false},
		{"cove-e2e12x-srv45", 0, false},
		{"cove-sb-1-h", 0, false},
	} {
		pid, ok := stalePid("cove-e2e", tc.name)
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("stalePid(%q) = %d, %v, want %d, %v", tc.name, pid, ok, tc.pid, tc.ok)
		}
	}
}

// TestStart starts two networks side by side and talks to every server
// from the host's namespace; closed, they leave nothing.
func TestStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	a, err := Start(ctx, Config{Base: "cove-tnt"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(ctx, Config{Base: "cove-tnt"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Prefix == b.Prefix || a.NS == b.NS {
		t.Fatalf("two networks share %v / %s", a.Prefix, a.NS)
	}
	for _, n := range []*Net{a, b} {
		checkServers(t, n)
	}
	ns, link := a.NS, a.hostLink
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if netns.Exists(ns) {
		t.Errorf("namespace %s left after Close", ns)
	}
	if _, err := net.InterfaceByName(link); err == nil {
		t.Errorf("link %s left after Close", link)
	}
}

func checkServers(t *testing.T, n *Net) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: n.CA.Pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			// Names of the zone, dialled at the allowed server.
			var d net.Dialer
			return d.DialContext(ctx, network, netip.AddrPortFrom(n.Allowed, HTTPSPort).String())
		},
	}}
	get := func(c *http.Client, url string) string {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, addr := range []netip.Addr{n.Allowed, n.Other} {
		want := fmt.Sprintf("%s %s host=%s sni=\n", Banner, addr, addr)
		if got := get(http.DefaultClient, "http://"+addr.String()+"/"); got != want {
			t.Errorf("GET http://%s/ = %q, want %q", addr, got, want)
		}
	}
	if got := get(hc, "https://"+SharedName+"/"); !strings.Contains(got, "sni="+SharedName) {
		t.Errorf("GET https://%s/ = %q", SharedName, got)
	}
	if got := get(http.DefaultClient, "http://"+n.Other.String()+"/bytes?n=100000"); len(got) != 100000 {
		t.Errorf("/bytes?n=100000 gave %d bytes", len(got))
	}

	for _, network := range []string{"tcp", "udp"} {
		c, err := net.DialTimeout(network, netip.AddrPortFrom(n.Other, EchoPort).String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("ping"))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Errorf("%s echo: %q %v", network, buf, err)
		}
		c.Close()
	}

	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  string
	}{
		{AllowedName, dns.TypeA, dns.RcodeSuccess, n.Allowed.String()},
		{WildName, dns.TypeA, dns.RcodeSuccess, n.Other.String()},
		{AllowedName, dns.TypeAAAA, dns.RcodeSuccess, ""},
		{"nowhere.test", dns.TypeA, dns.RcodeNameError, ""},
	} {
		for _, network := range []string{"udp", "tcp"} {
			m := new(dns.Msg).SetQuestion(dns.Fqdn(tc.name), tc.qtype)
			c := &dns.Client{Net: network, Timeout: 5 * time.Second}
			r, _, err := c.Exchange(m, n.DNS.String())
			if err != nil {
				t.Fatalf("%s %s over %s: %v", tc.name, dns.TypeToString[tc.qtype], network, err)
			}
			got := ""
			if len(r.Answer) == 1 {
				got = r.Answer[0].(*dns.A).A.String()
			}
			if r.Rcode != tc.rcode || got != tc.want {
				t.Errorf("%s %s over %s: rcode %d, answer %q; want %d, %q", tc.name, dns.TypeToString[tc.qtype], network, r.Rcode, got, tc.rcode, tc.want)
			}
		}
	}
	if got := n.Queries(AllowedName + "."); got != 4 {
		t.Errorf("Queries(%s) = %d, want 4", AllowedName, got)
	}
	if got := n.Queries(ForbiddenName); got != 0 {
		t.Errorf("Queries(%s) = %d, want 0", ForbiddenName, got)
	}
}
