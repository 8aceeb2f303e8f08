package preview

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// TunnelProtocol is the Upgrade token of a raw TCP tunnel to a guest's port
// (`cove port-forward`): after the 101, the connection carries that port's
// bytes both ways.
const TunnelProtocol = "cove-tcp"

// IsTunnelRequest reports whether r asks for a tunnel: an HTTP/1.1 GET with
// Connection: Upgrade and Upgrade: cove-tcp. A handler checks it before
// dialling the port it would tunnel to.
func IsTunnelRequest(r *http.Request) bool {
	return r.Method == http.MethodGet && r.ProtoAtLeast(1, 1) &&
		hasToken(r.Header, "Connection", "upgrade") && hasToken(r.Header, "Upgrade", TunnelProtocol)
}

// hasToken reports whether the comma-separated header key lists token, in
// any case.
func hasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// Tunnel hijacks w after answering 101 (Upgrade: cove-tcp) and copies bytes both ways with conn.
// It returns when both directions are done, each passing on its end as a
// half-close, and closes conn in every case. A request that is no tunnel
// request (IsTunnelRequest) gets 400.
func Tunnel(w http.ResponseWriter, r *http.Request, conn net.Conn) {
	defer conn.Close()
	if !IsTunnelRequest(r) {
		http.Error(w, "a tunnel needs an HTTP/1.1 GET with Connection: Upgrade and Upgrade: "+TunnelProtocol,
			http.StatusBadRequest)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "this connection cannot carry a tunnel: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer client.Close()
	_ = client.SetDeadline(time.Time{}) // a tunnel is idle as long as its ends like
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + TunnelProtocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	// Bytes the client sent after its request may already be buffered.
	var in io.Reader = client
	if n := brw.Reader.Buffered(); n > 0 {
		in = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)
	}
	splice(client, in, conn)
}

// splice copies a's input (in) to b and b to a until both directions end;
// an error in either ends both.
func splice(a net.Conn, in io.Reader, b net.Conn) {
	errc := make(chan error, 2)
	go func() { errc <- halfCopy(b, in) }()
	go func() { errc <- halfCopy(a, b) }()
	for range 2 {
		if err := <-errc; err != nil {
			a.Close()
			b.Close()
		}
	}
}

var errNoHalfClose = errors.New("connection cannot half-close")

// halfCopy copies src to dst and then closes dst's writing side, so that
// its reader sees the end while the other direction goes on.
func halfCopy(dst net.Conn, src io.Reader) error {
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoHalfClose
}

// UpgradeError is a tunnel the server refused: its answer, whose Body holds
// the first part of what it sent (enough for its error message).
type UpgradeError struct {
	Response *http.Response
}

func (e *UpgradeError) Error() string {
	return "tunnel refused: " + e.Response.Status
}

// maxRefusalBody bounds how much of a refusal's body DialTunnel keeps.
const maxRefusalBody = 16 << 10

// DialTunnel opens a tunnel: a GET to rawURL (http or https) with header
// and the upgrade headers over a connection of its own, which it returns
// after the server's 101, carrying the tunnel's bytes. ctx bounds only the
// set-up. A refusal is an *UpgradeError.
func DialTunnel(ctx context.Context, rawURL string, header http.Header) (net.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	port := u.Port()
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("tunnel: %q is not an http or https URL", rawURL)
	case port == "" && u.Scheme == "http":
		port = "80"
	case port == "":
		port = "443"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	conn, err := upgrade(ctx, c, u, header)
	if err != nil {
		c.Close()
		return nil, err
	}
	return conn, nil
}

// upgrade does DialTunnel's exchange over c, within ctx.
func upgrade(ctx context.Context, c net.Conn, u *url.URL, header http.Header) (net.Conn, error) {
	// Only once ctx is done, so that a read cut short says ctx's error.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if u.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tunnel: %w", err)
		}
		c = tc
	}
	req := &http.Request{
		Method: http.MethodGet, URL: u, Host: u.Host, Header: header.Clone(),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", TunnelProtocol)
	if err := req.Write(c); err != nil {
		return nil, tunnelErr(ctx, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, tunnelErr(ctx, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil, &UpgradeError{Response: resp}
	}
	if !hasToken(resp.Header, "Upgrade", TunnelProtocol) {
		return nil, fmt.Errorf("tunnel: the server switched to %q, not %s", resp.Header.Get("Upgrade"), TunnelProtocol)
	}
	if !stop() {
		return nil, fmt.Errorf("tunnel: %w", ctx.Err())
	}
	if br.Buffered() == 0 {
		return c, nil
	}
	return &bufferedConn{Conn: c, r: br}, nil
}

// tunnelErr says ctx's error rather than the deadline it set off.
func tunnelErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("tunnel: %w", ctx.Err())
	}
	return fmt.Errorf("tunnel: %w", err)
}

// bufferedConn reads first what the server sent right after its 101.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the connection beneath, where it can.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoHalfClose
}
