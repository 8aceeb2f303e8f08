package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cove-sandbox/cove/internal/testnet"
)

// TestTestnet: the suite's test servers answer from the host's namespace,
// where the daemon dials them: HTTP by address, HTTPS by name with the
// run's CA, and the zone server.
func TestTestnet(t *testing.T) {
	tn := suite.net
	if !tn.Prefix.Contains(tn.Allowed) || !strings.HasPrefix(tn.NS, "cove-e2e") {
		t.Fatalf("test network %s in %s", tn.Prefix, tn.NS)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: tn.CA.Pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, netip.AddrPortFrom(tn.Other, testnet.HTTPSPort).String())
		},
	}}
	for _, u := range []string{webURL("http", tn.Allowed), webURL("http", tn.Other), "https://" + testnet.OtherName + "/"} {
		c := http.DefaultClient
		if strings.HasPrefix(u, "https") {
			c = hc
		}
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(b), testnet.Banner+" ") {
			t.Errorf("GET %s: %q", u, b)
		}
	}
	m := new(dns.Msg).SetQuestion(testnet.AllowedName+".", dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, tn.DNS.String())
	if err != nil || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != tn.Allowed.String() {
		t.Errorf("the zone server: %v %v", r, err)
	}
}
