package testnet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/cove-sandbox/cove/internal/netns"
)

// MaxBytes bounds what GET /bytes?n= serves.
const MaxBytes = 4 << 30

// serve opens every server's sockets inside the namespace and serves them
// from this process.
func (n *Net) serve() error {
	var tcp []net.Listener
	var udp []net.PacketConn
	err := netns.Do(n.NS, func() error {
		for _, a := range []netip.Addr{n.Allowed, n.Other} {
			for _, port := range []int{HTTPPort, HTTPSPort, EchoPort} {
				l, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
				if err != nil {
					return err
				}
				tcp = append(tcp, l)
			}
			pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, EchoPort).String())
			if err != nil {
				return err
			}
			udp = append(udp, pc)
		}
		l, err := net.Listen("tcp", n.DNS.String())
		if err != nil {
			return err
		}
		tcp = append(tcp, l)
		pc, err := net.ListenPacket("udp", n.DNS.String())
		udp = append(udp, pc)
		return err
	})
	for _, l := range tcp {
		n.onClose(l.Close)
	}
	for _, pc := range udp {
		if pc != nil {
			n.onClose(pc.Close)
		}
	}
	if err != nil {
		return fmt.Errorf("testnet: listen in %s: %w", n.NS, err)
	}
	web := &http.Server{Handler: http.HandlerFunc(n.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	n.onClose(web.Close)
	for i := 0; i < 2; i++ {
		http0, https, echo := tcp[3*i], tcp[3*i+1], tcp[3*i+2]
		go web.Serve(http0)
		go web.Serve(tls.NewListener(https, &tls.Config{Certificates: []tls.Certificate{n.CA.Server}}))
		go serveEcho(echo)
		go serveUDPEcho(udp[i])
	}
	h := dns.HandlerFunc(n.serveDNS)
	dnsTCP := &dns.Server{Listener: tcp[6], Handler: h}
	dnsUDP := &dns.Server{PacketConn: udp[2], Handler: h}
	for _, s := range []*dns.Server{dnsTCP, dnsUDP} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		failed := make(chan error, 1)
		go func() { failed <- s.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-failed:
			return fmt.Errorf("testnet: DNS server: %w", err)
		}
		n.onClose(s.Shutdown)
	}
	return nil
}

// serveHTTP answers GET /bytes?n=N with N zero bytes, and anything else
// with the banner: the server's address, the Host header, and the TLS
// server name if any.
func (n *Net) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/bytes" {
		size, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || size < 0 || size > MaxBytes {
			http.Error(w, "want ?n= a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		io.CopyN(w, zeros{}, size)
		return
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	addr := ""
	if ap, err := netip.ParseAddrPort(fmt.Sprint(local)); err == nil {
		addr = ap.Addr().String()
	}
	sni := ""
	if r.TLS != nil {
		sni = r.TLS.ServerName
	}
	fmt.Fprintf(w, "%s %s host=%s sni=%s\n", Banner, addr, r.Host, sni)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			io.Copy(c, c)
		}()
	}
}

func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		k, from, err := pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err == nil {
			pc.WriteTo(buf[:k], from)
		}
	}
}

// serveDNS answers the zone: A records for its names, an empty answer for
// other types of them, NXDOMAIN for any other name. It counts every
// question.
func (n *Net) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
		n.mu.Lock()
		n.queries[name]++
		n.mu.Unlock()
		addr, ok := n.zone[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: TTL},
				A:   addr.AsSlice(),
			})
		}
	}
	w.WriteMsg(m)
}
