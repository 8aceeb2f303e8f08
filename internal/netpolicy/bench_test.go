package netpolicy

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkEgress measures a guest's egress through the proxy beside the
// same transfer made directly from the daemon's namespace, and the
// resolver's answer latency for an allowed name (upstream included):
//
//	go test -run '^$' -bench Egress -benchtime 2s ./internal/netpolicy/
func BenchmarkEgress(b *testing.B) {
	needRoot(b)
	tp := newTopology(b)
	sv := startServers(b, tp)
	m, err := New(Config{Upstream: []string{sv.upstream}, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	p := Policy{AllowCIDRs: []string{tp.serverIP + "/32"}, AllowDomains: []string{"www.allowed.test"}}
	if err := m.Attach(context.Background(), "sb", tp.h, p); err != nil {
		b.Fatal(err)
	}
	g := guest{ns: tp.g}
	sink := net.JoinHostPort(tp.serverIP, "7002")
	chunk := make([]byte, 1<<20)
	send := func(b *testing.B, dial func() (net.Conn, error)) {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		c.(*net.TCPConn).CloseWrite()
		if ok, err := io.ReadAll(c); string(ok) != "ok" {
			b.Fatalf("sink answered %q, %v", ok, err)
		}
	}
	b.Run("proxy", func(b *testing.B) { send(b, func() (net.Conn, error) { return g.dial(sink) }) })
	b.Run("direct", func(b *testing.B) { send(b, func() (net.Conn, error) { return net.Dial("tcp4", sink) }) })
	b.Run("dns", func(b *testing.B) {
		for range b.N {
			r, err := g.query("udp", "10.77.0.1:53", "www.allowed.test", dns.TypeA)
			if err != nil || len(r.Answer) != 1 {
				b.Fatal(r, err)
			}
		}
	})
}
