package netpolicy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/proc"
)

// needRoot skips a test that makes namespaces, except under CI, where
// it fails.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (CI=true)")
	}
	t.Skip("needs root")
}

// topology is a sandbox's network as a runtime makes it, and a test
// server beside the daemon:
//
//	guest ns g: eth0 10.77.0.2, default via 10.77.0.1
//	  └ veth ─ host-end ns h: veth0 10.77.0.1 (what Attach gets)
//	daemon's ns (the test's): veth "cvt<pid>" 10.99.N.1/24
//	  └ veth ─ server ns s: eth0 10.99.N.2 and .3 (servers), .4 (DNS)
//
// h has no route anywhere, as in cove: whatever the guest reaches, it
// reaches through the daemon's proxy, dialling from the test's namespace.
type topology struct {
	g, h, s  string
	veth     string
	daemonIP string // the test namespace's end: an address of the host
	serverIP string
	otherIP  string
	dnsIP    string // the upstream resolver's
	subnet   string
}

var staleTestNetns = regexp.MustCompile(`^cove-t([0-9]+)-[ghs]$`)

func newTopology(t testing.TB) *topology {
	t.Helper()
	ctx := context.Background()
	removeStale(t)
	pid := os.Getpid()
	n := 20 + pid%200
	id := "t" + strconv.Itoa(pid)
	tp := &topology{
		g: netns.Name(id, "g"), h: netns.Name(id, "h"), s: netns.Name(id, "s"),
		veth:     "cvt" + strconv.Itoa(pid),
		daemonIP: fmt.Sprintf("10.99.%d.1", n),
		serverIP: fmt.Sprintf("10.99.%d.2", n),
		otherIP:  fmt.Sprintf("10.99.%d.3", n),
		dnsIP:    fmt.Sprintf("10.99.%d.4", n),
		subnet:   fmt.Sprintf("10.99.%d.0/24", n),
	}
	t.Cleanup(func() {
		// Deleting a veth deletes its peer. A deleted namespace goes
		// (with its links) once nothing holds it, which may be later.
		if _, err := net.InterfaceByName(tp.veth); err == nil {
			if err := netns.IP(ctx, "", nil, "link", "del", tp.veth); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := netns.Delete(ctx, tp.g, tp.h, tp.s); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, ns := range []string{tp.g, tp.h, tp.s} {
		if err := netns.Add(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(ns, cmds string) {
		t.Helper()
		if err := netns.IP(ctx, ns, strings.NewReader(cmds), "-batch", "-"); err != nil {
			t.Fatal(err)
		}
	}
	batch(tp.h, fmt.Sprintf("link add veth0 mtu %d type veth peer name eth0 mtu %d netns %s\naddr add %s dev veth0\nlink set veth0 up\nlink set lo up\n",
		netns.MTU, netns.MTU, tp.g, netns.HostAddr))
	batch(tp.g, fmt.Sprintf("addr add %s dev eth0\nlink set eth0 up\nlink set lo up\nroute add default via 10.77.0.1\n", netns.GuestAddr))
	batch("", fmt.Sprintf("link add %s type veth peer name eth0 netns %s\naddr add %s/24 dev %s\nlink set %s up\n", tp.veth, tp.s, tp.daemonIP, tp.veth, tp.veth))
	batch(tp.s, fmt.Sprintf("addr add %s/24 dev eth0\naddr add %s/24 dev eth0\naddr add %s/24 dev eth0\nlink set eth0 up\nlink set lo up\n",
		tp.serverIP, tp.otherIP, tp.dnsIP))
	return tp
}

// removeStale deletes the namespaces a killed run of these tests left.
func removeStale(t testing.TB) {
	ents, err := os.ReadDir(netns.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := staleTestNetns.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid != os.Getpid() && !proc.Alive(pid) {
			t.Logf("removing %s, left by process %d", e.Name(), pid)
			netns.Delete(context.Background(), e.Name())
		}
	}
}

// listen opens a listener inside namespace ns ("": the test's own).
func listen(t testing.TB, ns, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	do := func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	}
	var err error
	if ns == "" {
		err = do()
	} else {
		err = netns.Do(ns, do)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// counter counts connections (or packets) by the local address they came to.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(addr net.Addr) {
	host, _, _ := net.SplitHostPort(addr.String())
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[host]++
}

func (c *counter) get(host string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[host]
}

// servers are the test's servers in namespace s: TCP echo on 7000, a
// sink on 7002 (it reads to the end, then answers "ok"), HTTP on 80, HTTPS on 443 and a UDP sink on 9999, on every address there, and
// the upstream DNS on its own address (which the proxy never dials).
type servers struct {
	echo, web, udp counter
	zone           *testZone
	upstream       string
}

func startServers(t testing.TB, tp *topology) *servers {
	t.Helper()
	sv := &servers{zone: &testZone{a: map[string]string{
		"www.allowed.test.":   tp.serverIP,
		"forbidden.test.":     tp.serverIP, // a forbidden name at an allowed address
		"deny.allowed.test.":  tp.serverIP,
		"other.allowed.test.": tp.otherIP,
	}}}
	serveTCP(listen(t, tp.s, "tcp4", ":7000"), func(c net.Conn) {
		sv.echo.add(c.LocalAddr())
		io.Copy(c, c)
	})
	serveTCP(listen(t, tp.s, "tcp4", ":7002"), func(c net.Conn) {
		io.Copy(io.Discard, c)
		c.Write([]byte("ok"))
	})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s remote=%s", r.Host, strings.Split(r.RemoteAddr, ":")[0])
	})
	for _, port := range []string{":80", ":443"} {
		srv := httptest.NewUnstartedServer(handler)
		srv.Listener.Close()
		srv.Listener = listen(t, tp.s, "tcp4", port)
		srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				sv.web.add(c.LocalAddr())
			}
		}
		if port == ":443" {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
	}
	var udp net.PacketConn
	if err := netns.Do(tp.s, func() (err error) { udp, err = net.ListenPacket("udp4", ":9999"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, _, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			sv.udp.add(&net.UDPAddr{IP: net.ParseIP(tp.serverIP)})
		}
	}()
	sv.upstream = net.JoinHostPort(tp.dnsIP, "53")
	var pc net.PacketConn
	var ln net.Listener
	err := netns.Do(tp.s, func() (err error) {
		pc, ln, err = listenBoth(sv.upstream)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	serveDNSOn(t, sv.zone, pc, ln)
	return sv
}

// serveTCP serves each connection ln accepts with handle, then closes it.
func serveTCP(ln net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { handle(c); c.Close() }()
		}
	}()
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
