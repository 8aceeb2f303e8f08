package netpolicy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/cove-sandbox/cove/internal/netns"
)

// sandbox is one attached sandbox's egress.
type sandbox struct {
	id, ns   string
	rules    atomic.Pointer[rules]
	admitted *admitted

	cancel context.CancelFunc
	proxy  *proxy
	dns    []*dns.Server
	wg     sync.WaitGroup // the DNS servers' goroutines
}

// start opens sb's listeners in its namespace and serves them from the
// daemon's own.
func (m *Manager) start(sb *sandbox) error {
	host := netip.MustParsePrefix(netns.HostAddr).Addr().String()
	var udp net.PacketConn
	var dnsTCP, proxyLn net.Listener
	err := netns.Do(sb.ns, func() error {
		var err error
		if udp, err = net.ListenPacket("udp4", net.JoinHostPort(host, strconv.Itoa(dnsPort))); err != nil {
			return err
		}
		if dnsTCP, err = net.Listen("tcp4", net.JoinHostPort(host, strconv.Itoa(dnsPort))); err != nil {
			return err
		}
		proxyLn, err = net.Listen("tcp4", net.JoinHostPort(host, strconv.Itoa(proxyPort)))
		return err
	})
	if err != nil {
		for _, c := range []interface{ Close() error }{udp, dnsTCP, proxyLn} {
			if c != nil {
				c.Close()
			}
		}
		return fmt.Errorf("listen in %s: %w", sb.ns, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sb.cancel = cancel
	var d net.Dialer
	sb.proxy = &proxy{
		sb: sb, guard: m.guard, log: m.log, ln: proxyLn.(*net.TCPListener),
		dial: d.DialContext, now: time.Now, conns: map[*net.TCPConn]*net.TCPConn{},
	}
	res := &resolver{sb: sb, upstream: m.upstream, log: m.log, ctx: ctx, sem: make(chan struct{}, maxDNSInFlight), now: time.Now}
	sb.dns = []*dns.Server{
		{PacketConn: udp, Handler: res, UDPSize: dns.DefaultMsgSize},
		{Listener: &limitListener{Listener: dnsTCP, sem: make(chan struct{}, maxDNSConns)}, Handler: res},
	}
	for _, srv := range sb.dns {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		failed := make(chan error, 1)
		sb.wg.Add(1)
		go func() {
			defer sb.wg.Done()
			if err := srv.ActivateAndServe(); err != nil {
				failed <- err
				m.log.Warn("netpolicy: dns server", "sandbox", sb.id, "err", err)
			}
		}()
		// Shutdown must not come before the server has started.
		select {
		case <-started:
		case err := <-failed:
			sb.stop()
			return err
		}
	}
	sb.proxy.wg.Add(1)
	go sb.proxy.serve(ctx)
	return nil
}

// stop ends what start began, whatever of it did begin.
func (sb *sandbox) stop() {
	if sb.cancel != nil {
		sb.cancel()
	}
	if sb.proxy != nil {
		sb.proxy.close()
	}
	for _, srv := range sb.dns {
		srv.Shutdown() // an error only says it had not started
		if srv.PacketConn != nil {
			srv.PacketConn.Close()
		}
		if srv.Listener != nil {
			srv.Listener.Close()
		}
	}
	sb.wg.Wait()
}

// limitListener refuses connections past a bound: each holds a slot of sem
// until it is closed.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
		default:
			c.Close()
		}
	}
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	c.release()
	return c.Conn.Close()
}
