package netpolicy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// peekLimit bounds what the proxy reads before it has a name: a TLS
// ClientHello fits a record (16 KiB), and an HTTP request's headers fit too.
const peekLimit = 16<<10 + 5

// errPeekDone stops crypto/tls once it has parsed the ClientHello.
var errPeekDone = errors.New("client hello read")

// peekName reads the start of what a client sends to port 80 or 443 and
// returns the name it asks for ("" if none can be read) and every byte it
// read, which the proxy replays to the destination. It reads for at most
// timeout.
func peekName(c net.Conn, port uint16, timeout time.Duration) (name string, peeked []byte) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", nil
	}
	defer c.SetReadDeadline(time.Time{})
	rec := &recorder{r: c, left: peekLimit}
	switch port {
	case portHTTP:
		name = httpHost(rec)
	case portHTTPS:
		name = tlsServerName(&recordingConn{Conn: c, rec: rec})
	}
	return name, rec.buf.Bytes()
}

// recorder reads through to r, keeping every byte, up to a limit.
type recorder struct {
	r    io.Reader
	buf  bytes.Buffer
	left int
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, errors.New("peek limit reached")
	}
	if len(p) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	r.left -= n
	return n, err
}

// httpHost reads an HTTP/1 request's head and returns its host, or "" if
// it is not HTTP or names its host ambiguously.
func httpHost(rec *recorder) string {
	chunk := make([]byte, 4096)
	for seen := 0; ; {
		_, err := rec.Read(chunk)
		if bytes.Contains(rec.buf.Bytes()[seen:], []byte("\r\n\r\n")) {
			break
		}
		if err != nil {
			return ""
		}
		seen = max(0, rec.buf.Len()-3) // the end may arrive a byte at a time
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(rec.buf.Bytes())))
	line, err := tp.ReadLine()
	if err != nil {
		return ""
	}
	method, rest, ok := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 || method == "CONNECT" || !strings.HasPrefix(proto, "HTTP/1.") {
		return ""
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return ""
	}
	hosts := hdr.Values("Host")
	if len(hosts) > 1 {
		return "" // a server may read another one than the first
	}
	if strings.HasPrefix(target, "/") || target == "*" {
		if len(hosts) == 0 {
			return ""
		}
		return hostName(hosts[0])
	}
	// An absolute URL names the host, and a server may read either it or
	// the Host header: they must agree.
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || len(hosts) == 1 && hosts[0] != u.Host {
		return ""
	}
	return hostName(u.Host)
}

// hostName is the name in a Host value, without its port.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	return normalizeName(host)
}

// tlsServerName parses a ClientHello with crypto/tls's own parser, stopping
// the handshake once it has it, and returns its SNI.
func tlsServerName(c *recordingConn) string {
	var name string
	srv := tls.Server(c, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			name = hello.ServerName
			return nil, errPeekDone
		},
	})
	if err := srv.Handshake(); !errors.Is(err, errPeekDone) {
		return ""
	}
	if isIP(name) {
		return ""
	}
	return normalizeName(name)
}

// recordingConn is what crypto/tls reads a ClientHello from: reads are
// recorded, and what it would send (an alert) is discarded, so the client
// sees nothing of the peek.
type recordingConn struct {
	net.Conn
	rec *recorder
}

func (c *recordingConn) Read(p []byte) (int, error)         { return c.rec.Read(p) }
func (c *recordingConn) Write(p []byte) (int, error)        { return len(p), nil }
func (c *recordingConn) Close() error                       { return nil }
func (c *recordingConn) SetDeadline(time.Time) error        { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error    { return nil }
func (c *recordingConn) SetWriteDeadline(t time.Time) error { return nil }
