package netpolicy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// peekTimeout bounds the wait for a client's first bytes on port 80
	// or 443; clients send them at once.
	peekTimeout = 3 * time.Second
	// dialTimeout bounds the proxy's connection to a destination.
	dialTimeout = 10 * time.Second
	// maxConns bounds a sandbox's proxied connections; past it, new ones
	// are refused.
	maxConns = 512
)

// proxy is a sandbox's transparent TCP proxy: every TCP connection the
// guest opens arrives here (redirected by the namespace's rules), is judged
// by its original destination and the name it asks for, and is dialled from
// the daemon's namespace if allowed.
type proxy struct {
	sb    *sandbox
	guard *guard
	log   *slog.Logger
	ln    *net.TCPListener
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	now   func() time.Time

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[*net.TCPConn]*net.TCPConn // open client connections, to their destination's once dialled
	done  bool
}

// serve accepts until the listener is closed. Other accept errors (the
// daemon out of descriptors) pass: the proxy waits a little and goes on.
func (p *proxy) serve(ctx context.Context) {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("proxy: accept", "sandbox", p.sb.id, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if !p.track(c) {
			p.log.Debug("proxy: refused", "sandbox", p.sb.id, "why", "too many connections")
			reset(c)
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(ctx, c)
		}()
	}
}

// track records c as open; false if the proxy is closing or full.
func (p *proxy) track(c *net.TCPConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || len(p.conns) >= maxConns {
		return false
	}
	p.conns[c] = nil
	return true
}

// joined records up as c's destination connection; false if the proxy is
// closing.
func (p *proxy) joined(c, up *net.TCPConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.conns[c] = up
	return true
}

func (p *proxy) untrack(c *net.TCPConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// close stops accepting, closes every open connection and waits for their
// goroutines to end.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.done = true
	for c, up := range p.conns {
		c.Close()
		if up != nil {
			up.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// handle judges one client connection and, if allowed, joins it to its
// destination; a refused connection is reset.
func (p *proxy) handle(ctx context.Context, c *net.TCPConn) {
	dst, err := originalDst(c)
	if err != nil {
		p.log.Debug("proxy: no original destination", "sandbox", p.sb.id, "err", err)
		reset(c)
		return
	}
	r := p.sb.rules.Load()
	cn := conn{dst: dst, admitted: p.sb.admitted.has(dst.Addr(), p.now())}
	if _, _, why := p.guard.judgeAddr(r, dst.Addr(), cn.admitted); why != "" {
		p.refuse(c, cn, why)
		return
	}
	var peeked []byte
	if port := dst.Port(); port == portHTTP || port == portHTTPS {
		cn.name, peeked = peekName(c, port, peekTimeout)
		r = p.sb.rules.Load() // the policy may have changed meanwhile
	}
	if ok, why := p.guard.judge(r, cn); !ok {
		p.refuse(c, cn, why)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	up, err := p.dial(dctx, "tcp4", dst.String())
	cancel()
	if err != nil {
		p.log.Debug("proxy: dial failed", "sandbox", p.sb.id, "dst", dst, "name", cn.name, "err", err)
		reset(c)
		return
	}
	upc, ok := up.(*net.TCPConn)
	if !ok || !p.joined(c, upc) {
		up.Close()
		reset(c)
		return
	}
	if _, err := upc.Write(peeked); err != nil {
		reset(c)
		upc.Close()
		return
	}
	join(c, upc)
}

func (p *proxy) refuse(c *net.TCPConn, cn conn, why string) {
	p.log.Debug("proxy: refused", "sandbox", p.sb.id, "dst", cn.dst, "name", cn.name, "why", why)
	reset(c)
}

// join copies bytes both ways until both directions end, passing on each
// half-close; an error in either direction closes both. Copying between
// two *net.TCPConn splices in the kernel.
func join(a, b *net.TCPConn) {
	var wg sync.WaitGroup
	half := func(dst, src *net.TCPConn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			a.Close()
			b.Close()
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go half(b, a)
	half(a, b)
	wg.Wait()
	a.Close()
	b.Close()
}

// reset closes c with a RST rather than a FIN: the client sees a refused
// connection, not an empty answer.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// originalDst is where the guest addressed a redirected connection
// (SO_ORIGINAL_DST, from the connection's conntrack entry). The kernel
// writes a sockaddr_in; x/sys reads it through the one getsockopt of a
// struct at least as large (IPv6Mreq), as is customary.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var mreq *unix.IPv6Mreq
	var serr error
	err = rc.Control(func(fd uintptr) {
		mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	sa := mreq.Multiaddr // family (2 bytes), port, address, all in network order
	port := binary.BigEndian.Uint16(sa[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port), nil
}
