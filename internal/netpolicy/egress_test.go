package netpolicy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/cove-sandbox/cove/internal/netns"
)

// guest is the test's hands inside the guest namespace.
type guest struct{ ns string }

func (g guest) dial(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return netns.Dial(ctx, g.ns, addr)
}

// echo says whether a line sent to addr comes back; a connection the
// proxy refuses is reset at once.
func (g guest) echo(addr string) error {
	c, err := g.dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("echo answered %q", line)
	}
	return nil
}

// send connects to addr and sends data, for a test that goes on with
// the connection.
func (g guest) send(t testing.TB, addr, data string) net.Conn {
	t.Helper()
	c, err := g.dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(data)); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// get fetches scheme://host/ from addr (sending host as Host or SNI).
func (g guest) get(scheme, host, addr string) (string, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return netns.Dial(ctx, g.ns, addr)
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // the SNI is under test, not the certificate
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(scheme + "://" + host + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// query asks server (from the guest) for name.
func (g guest) query(network, server, name string, qtype uint16) (*dns.Msg, error) {
	var reply *dns.Msg
	err := netns.Do(g.ns, func() (err error) {
		c := &dns.Client{Net: network, Timeout: 3 * time.Second}
		reply, _, err = c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype), server)
		return err
	})
	return reply, err
}

// refused says err is what a refused connection gives the guest: a reset,
// or an end before any answer.
func refused(err error) bool {
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "Timeout")
}

// TestEgress runs one sandbox's egress end to end: a guest namespace, the
// host-end namespace Attach gets, and test servers (TCP echo, HTTP, HTTPS,
// a UDP sink and the upstream DNS) in a namespace the daemon reaches.
func TestEgress(t *testing.T) {
	needRoot(t)
	tp := newTopology(t)
	sv := startServers(t, tp)
	g := guest{ns: tp.g}
	m, err := New(Config{
		Upstream:          []string{sv.upstream},
		ResolvablePrivate: []netip.Prefix{netip.MustParsePrefix(tp.subnet)},
		Presets:           map[string]Policy{"test": {AllowDomains: []string{"allowed.test", "*.allowed.test"}}},
		Logger:            testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	// The goroutines the test has before Attach, and in a subtest that
	// subtest's own.
	baseline := runtime.NumGoroutine() + 1
	ctx := context.Background()
	const id = "sb"
	server, other := tp.serverIP, tp.otherIP
	at := func(ip, port string) string { return net.JoinHostPort(ip, port) }

	if err := m.Update(id, Policy{}); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Update before Attach = %v", err)
	}
	if err := m.Attach(ctx, id, tp.h, Policy{Presets: []string{"nope"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Attach of an invalid policy = %v", err)
	}
	if err := m.Attach(ctx, id, "cove-no-such-ns", Policy{}); err == nil {
		t.Fatal("Attach to a missing namespace succeeded")
	}
	if err := m.Attach(ctx, id, tp.h, Policy{}); err != nil {
		t.Fatal(err)
	}
	rulesBefore := countRules(t, tp.h)

	t.Run("deny by default", func(t *testing.T) {
		if err := g.echo(at(server, "7000")); !refused(err) {
			t.Errorf("echo: %v, want refused", err)
		}
		if r, err := g.query("udp", "10.77.0.1:53", "allowed.test", dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
			t.Errorf("query: %v %v, want NXDOMAIN", r, err)
		}
		if n := sv.echo.get(server) + sv.zone.total(); n != 0 {
			t.Errorf("servers saw %d connections or queries", n)
		}
	})

	t.Run("CIDR", func(t *testing.T) {
		if err := m.Update(id, Policy{AllowCIDRs: []string{server + "/32"}}); err != nil {
			t.Fatal(err)
		}
		if err := g.echo(at(server, "7000")); err != nil {
			t.Errorf("echo to an allowed CIDR: %v", err)
		}
		if body, err := g.get("http", "anything.test", at(server, "80")); err != nil || body != "host=anything.test remote="+tp.daemonIP {
			t.Errorf("GET through the proxy = %q, %v; want it dialled from the daemon's namespace", body, err)
		}
		if err := g.echo(at(other, "7000")); !refused(err) {
			t.Errorf("echo beside the allowed CIDR: %v, want refused", err)
		}
		// A half-close passes through: the echo server sees the end of
		// what was sent, answers all of it and closes.
		c := g.send(t, at(server, "7000"), "half")
		defer c.Close()
		c.(*net.TCPConn).CloseWrite()
		if got, err := io.ReadAll(c); string(got) != "half" || err != nil {
			t.Errorf("after a half-close: %q, %v", got, err)
		}
		if n := sv.echo.get(other); n != 0 {
			t.Errorf("%s saw %d connections", other, n)
		}
	})

	t.Run("always denied", func(t *testing.T) {
		// The whole test subnet is allowed, the daemon's own address in it
		// (an address of the host) is still not.
		if err := m.Update(id, Policy{AllowCIDRs: []string{tp.subnet}}); err != nil {
			t.Fatal(err)
		}
		var hostConns counter
		serveTCP(listen(t, "", "tcp4", at(tp.daemonIP, "7001")), func(c net.Conn) { hostConns.add(c.LocalAddr()) })
		for _, addr := range []string{at(tp.daemonIP, "7001"), "169.254.169.254:80", "10.77.0.1:15001", "127.0.0.1:7001", at(tp.dnsIP, "7000")} {
			if err := g.echo(addr); !refused(err) {
				t.Errorf("echo to %s: %v, want refused", addr, err)
			}
		}
		if n := hostConns.get(tp.daemonIP); n != 0 {
			t.Errorf("the host's address saw %d connections", n)
		}
		if err := g.echo(at(other, "7000")); err != nil {
			t.Errorf("echo inside the allowed subnet: %v", err)
		}
		// IPv6 goes nowhere, even to a listener in the host-end namespace.
		if err := netns.IP(ctx, tp.h, nil, "addr", "add", "fd00:77::1/64", "dev", "veth0", "nodad"); err != nil {
			t.Fatal(err)
		}
		if err := netns.IP(ctx, tp.g, nil, "addr", "add", "fd00:77::2/64", "dev", "eth0", "nodad"); err != nil {
			t.Fatal(err)
		}
		v6 := listen(t, tp.h, "tcp6", "[fd00:77::1]:7777")
		go func() {
			if c, err := v6.Accept(); err == nil {
				t.Errorf("an IPv6 connection from the guest arrived")
				c.Close()
			}
		}()
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if c, err := netns.Dial(dctx, tp.g, "[fd00:77::1]:7777"); err == nil {
			c.Close()
			t.Error("the guest connected over IPv6")
		}
		// UDP other than DNS goes nowhere.
		err := netns.Do(tp.g, func() error {
			c, err := net.Dial("udp4", at(server, "9999"))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("x"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if n := sv.udp.get(server); n != 0 {
			t.Errorf("the UDP sink got %d packets", n)
		}
	})

	t.Run("DNS", func(t *testing.T) {
		if err := m.Update(id, Policy{Presets: []string{"test"}, DenyDomains: []string{"deny.allowed.test"}}); err != nil {
			t.Fatal(err)
		}
		for _, server := range []string{"10.77.0.1:53", at(tp.dnsIP, "53"), "192.0.2.53:53"} {
			for _, network := range []string{"udp", "tcp"} {
				r, err := g.query(network, server, "www.allowed.test", dns.TypeA)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != tp.serverIP {
					t.Errorf("%s %s: allowed name: %v %v", network, server, r, err)
				}
				for _, name := range []string{"forbidden.test", "deny.allowed.test"} {
					if r, err := g.query(network, server, name, dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
						t.Errorf("%s %s: %s: %v %v, want NXDOMAIN", network, server, name, r, err)
					}
				}
				if r, err := g.query(network, server, "allowed.test", dns.TypeAAAA); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
					t.Errorf("%s %s: AAAA: %v %v, want an empty answer", network, server, r, err)
				}
			}
		}
		if n := sv.zone.count("www.allowed.test"); n != 6 {
			t.Errorf("upstream asked %d times for the allowed name, want 6", n)
		}
		for _, name := range []string{"forbidden.test", "deny.allowed.test"} {
			if n := sv.zone.count(name); n != 0 {
				t.Errorf("a name not allowed reached the upstream %d times: %s", n, name)
			}
		}
		if n := sv.zone.total(); n != 6 {
			t.Errorf("upstream asked %d questions, want 6 (%v)", n, sv.zone.names)
		}
	})

	t.Run("by name", func(t *testing.T) {
		// www.allowed.test resolved to the server just now: admitted.
		for _, tc := range []struct {
			scheme, host, addr string
			ok                 bool
		}{
			{"http", "www.allowed.test", at(server, "80"), true},
			{"https", "www.allowed.test", at(server, "443"), true},
			{"http", "forbidden.test", at(server, "80"), false},   // a forbidden name at an allowed address
			{"https", "forbidden.test", at(server, "443"), false}, // by SNI
			{"http", "deny.allowed.test", at(server, "80"), false},
			{"http", server, at(server, "80"), false},              // a raw IP
			{"https", "www.allowed.test", at(other, "443"), false}, // not resolved there
		} {
			before := sv.web.get(strings.Split(tc.addr, ":")[0])
			body, err := g.get(tc.scheme, tc.host, tc.addr)
			if tc.ok && (err != nil || !strings.HasPrefix(body, "host="+tc.host+" ")) {
				t.Errorf("%s://%s at %s = %q, %v", tc.scheme, tc.host, tc.addr, body, err)
			}
			if !tc.ok && (!refused(err) || sv.web.get(strings.Split(tc.addr, ":")[0]) != before) {
				t.Errorf("%s://%s at %s = %q, %v; want refused before reaching the server", tc.scheme, tc.host, tc.addr, body, err)
			}
		}
		// Other ports by address: resolved, or not.
		if err := g.echo(at(server, "7000")); err != nil {
			t.Errorf("echo to a resolved address: %v", err)
		}
		if err := g.echo(at(other, "7000")); !refused(err) {
			t.Errorf("echo to an address not resolved: %v", err)
		}
	})

	t.Run("update", func(t *testing.T) {
		if err := m.Update(id, Policy{AllowCIDRs: []string{"not a cidr"}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Update of an invalid policy = %v", err)
		}
		if err := g.echo(at(server, "7000")); err != nil {
			t.Errorf("an invalid update changed the policy: %v", err)
		}
		// What was admitted for names no longer allowed goes with them.
		if err := m.Update(id, Policy{AllowCIDRs: []string{other + "/32"}}); err != nil {
			t.Fatal(err)
		}
		if err := g.echo(at(server, "7000")); !refused(err) {
			t.Errorf("echo to an address admitted under the old policy: %v", err)
		}
		if err := g.echo(at(other, "7000")); err != nil {
			t.Errorf("echo to the newly allowed CIDR: %v", err)
		}
		if r, err := g.query("udp", "10.77.0.1:53", "www.allowed.test", dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
			t.Errorf("query: %v %v, want NXDOMAIN", r, err)
		}
	})

	t.Run("re-attach", func(t *testing.T) {
		// As after a daemon restart: rules and listeners are replaced.
		if err := m.Attach(ctx, id, tp.h, Policy{AllowCIDRs: []string{server + "/32"}}); err != nil {
			t.Fatal(err)
		}
		if n := countRules(t, tp.h); n != rulesBefore {
			t.Errorf("%d rules after re-attach, %d before", n, rulesBefore)
		}
		if err := g.echo(at(server, "7000")); err != nil {
			t.Errorf("echo after re-attach: %v", err)
		}
		if err := g.echo(at(other, "7000")); !refused(err) {
			t.Errorf("echo to the old policy's CIDR: %v", err)
		}
	})

	t.Run("detach", func(t *testing.T) {
		open := g.send(t, at(server, "7000"), "a\n")
		defer open.Close()
		if _, err := bufio.NewReader(open).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		m.Detach(id)
		m.Detach(id) // again: nothing to do
		if _, err := open.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a proxied connection outlived Detach: %v", err)
		}
		if socks := listeningSockets(t, tp.h); len(socks) != 0 {
			t.Errorf("sockets left in %s: %v", tp.h, socks)
		}
		if err := g.echo(at(server, "7000")); !refused(err) {
			t.Errorf("echo after Detach: %v", err)
		}
		// The rules stay, failing closed, until the namespace goes.
		if n := countRules(t, tp.h); n != rulesBefore {
			t.Errorf("%d rules after Detach, want %d", n, rulesBefore)
		}
		if err := m.Update(id, Policy{}); !errors.Is(err, ErrNotAttached) {
			t.Errorf("Update after Detach = %v", err)
		}
		waitGoroutines(t, baseline)
	})

	t.Run("close", func(t *testing.T) {
		if err := m.Attach(ctx, id, tp.h, Policy{}); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if socks := listeningSockets(t, tp.h); len(socks) != 0 {
			t.Errorf("sockets left after Close: %v", socks)
		}
		if err := m.Attach(ctx, id, tp.h, Policy{}); err == nil {
			t.Error("Attach after Close succeeded")
		}
		waitGoroutines(t, baseline)
	})
}

// countRules counts the rules of cove's table in ns, checking it is the
// only table there.
func countRules(t *testing.T, ns string) int {
	t.Helper()
	f, err := os.Open(netns.Dir + "/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Name != tableName || tables[0].Family != nftables.TableFamilyINet {
		t.Fatalf("tables in %s: %v", ns, tables)
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ch := range chains {
		rules, err := c.GetRules(tables[0], ch)
		if err != nil {
			t.Fatal(err)
		}
		n += len(rules)
	}
	if len(chains) != 4 || n == 0 {
		t.Fatalf("%d chains, %d rules in %s", len(chains), n, ns)
	}
	return n
}

// listeningSockets lists the TCP and UDP sockets bound in ns, from its
// /proc/net tables.
func listeningSockets(t *testing.T, ns string) []string {
	t.Helper()
	var socks []string
	err := netns.Do(ns, func() error {
		for _, table := range []string{"tcp", "udp", "tcp6", "udp6"} {
			data, err := os.ReadFile("/proc/thread-self/net/" + table)
			if err != nil {
				return err
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				// st 0A is LISTEN; 07 is an unconnected UDP socket.
				if len(f) > 3 && (f[3] == "0A" || strings.HasPrefix(table, "udp")) {
					socks = append(socks, table+" "+f[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return socks
}

// waitGoroutines waits for the goroutine count to fall back to n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines, %d before Attach:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
