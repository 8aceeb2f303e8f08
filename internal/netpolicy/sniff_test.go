package netpolicy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// peekPipe writes each chunk to one end of a pipe, closing it after them
// if eof, and peeks at the other end.
func peekPipe(t *testing.T, port uint16, chunks []string, eof bool, timeout time.Duration) (string, []byte) {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		for _, c := range chunks {
			if _, err := client.Write([]byte(c)); err != nil {
				return
			}
		}
		if eof {
			client.Close()
		}
	}()
	defer client.Close()
	return peekName(server, port, timeout)
}

func TestPeekHTTPHost(t *testing.T) {
	long := "GET / HTTP/1.1\r\nHost: a.test\r\nX: " + strings.Repeat("x", peekLimit) + "\r\n\r\n"
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"host", []string{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"}, "allowed.test"},
		{"case, port and dot", []string{"GET / HTTP/1.1\r\nHost: Allowed.TEST.:80\r\nAccept: */*\r\n\r\n"}, "allowed.test"},
		{"byte at a time", strings.Split("GET /x HTTP/1.1\r\nUser-Agent: t\r\nHost: slow.test\r\n\r\n", ""), "slow.test"},
		{"with a body", []string{"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc"}, "a.test"},
		{"absolute URL", []string{"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"}, "a.test"},
		{"absolute URL, other Host", []string{"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n"}, ""},
		{"two Hosts", []string{"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"}, ""},
		{"no Host", []string{"GET / HTTP/1.0\r\n\r\n"}, ""},
		{"IPv4 Host", []string{"GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n"}, ""},
		{"IPv6 Host", []string{"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"}, ""},
		{"not a hostname", []string{"GET / HTTP/1.1\r\nHost: a.test/x\r\n\r\n"}, ""},
		{"HTTP/2 preface", []string{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"}, ""},
		{"not HTTP", []string{"\x16\x03\x01\x00\x05hello\r\n\r\n"}, ""},
		{"headers cut short", []string{"GET / HTTP/1.1\r\nHost: a.test\r\n"}, ""},
		{"headers past the limit", []string{long}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, peeked := peekPipe(t, portHTTP, tc.chunks, true, 2*time.Second)
			if name != tc.want {
				t.Errorf("name = %q, want %q", name, tc.want)
			}
			sent := strings.Join(tc.chunks, "")
			if len(peeked) == 0 || !strings.HasPrefix(sent, string(peeked)) || len(peeked) > peekLimit {
				t.Errorf("peeked %d bytes, not a prefix of the %d sent within the limit", len(peeked), len(sent))
			}
		})
	}
}

func TestPeekTimeout(t *testing.T) {
	start := time.Now()
	name, peeked := peekPipe(t, portHTTP, []string{"GET / HTTP/1.1\r\nHost: a.test\r\n"}, false, 100*time.Millisecond)
	if name != "" || string(peeked) != "GET / HTTP/1.1\r\nHost: a.test\r\n" {
		t.Errorf("peek = %q, %q", name, peeked)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("peek took %v, past its timeout", d)
	}
	// A client that sends nothing (a server-speaks-first protocol on 443).
	name, peeked = peekPipe(t, portHTTPS, nil, false, 100*time.Millisecond)
	if name != "" || len(peeked) != 0 {
		t.Errorf("peek of silence = %q, %q", name, peeked)
	}
}

// slowConn writes one byte at a time: a ClientHello in many TCP segments.
type slowConn struct{ net.Conn }

func (c slowConn) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := c.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

func TestPeekTLSServerName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config *tls.Config
		slow   bool
		want   string
	}{
		{"sni", &tls.Config{ServerName: "allowed.test"}, false, "allowed.test"},
		{"case", &tls.Config{ServerName: "Allowed.Test"}, false, "allowed.test"},
		{"TLS 1.2", &tls.Config{ServerName: "old.test", MaxVersion: tls.VersionTLS12}, false, "old.test"},
		{"many ALPN protocols", &tls.Config{ServerName: "big.test", NextProtos: manyProtos()}, false, "big.test"},
		{"byte at a time", &tls.Config{ServerName: "slow.test"}, true, "slow.test"},
		{"no SNI", &tls.Config{InsecureSkipVerify: true}, false, ""},
		{"IP literal (not sent)", &tls.Config{ServerName: "192.0.2.1"}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			sent := &bytes.Buffer{}
			go func() {
				var c net.Conn = &teeConn{Conn: client, w: sent}
				if tc.slow {
					c = slowConn{c}
				}
				tls.Client(c, tc.config).Handshake() // fails: nothing answers
			}()
			name, peeked := peekName(server, portHTTPS, 2*time.Second)
			client.Close()
			if name != tc.want {
				t.Errorf("name = %q, want %q", name, tc.want)
			}
			if len(peeked) < 5 || peeked[0] != 0x16 {
				t.Errorf("peeked %d bytes, not a TLS record", len(peeked))
			}
		})
	}
}

func TestPeekTLSNotTLS(t *testing.T) {
	req := "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
	name, peeked := peekPipe(t, portHTTPS, []string{req}, true, 2*time.Second)
	if name != "" || !strings.HasPrefix(req, string(peeked)) || len(peeked) == 0 {
		t.Errorf("peek = %q, %q", name, peeked)
	}
}

func manyProtos() []string {
	var p []string
	for i := range 300 {
		p = append(p, fmt.Sprintf("proto-%03d", i))
	}
	return p
}

type teeConn struct {
	net.Conn
	w io.Writer
}

func (c *teeConn) Write(p []byte) (int, error) {
	c.w.Write(p)
	return c.Conn.Write(p)
}

// TestPeekReplay joins a peeked client connection to a real server, as the
// proxy does, and the client's request completes: nothing read by the peek
// is lost, for HTTP and for TLS.
func TestPeekReplay(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s tls=%v", r.Host, r.TLS != nil)
	})
	for _, tc := range []struct {
		name string
		port uint16
		srv  *httptest.Server
	}{
		{"http", portHTTP, httptest.NewServer(handler)},
		{"https", portHTTPS, httptest.NewTLSServer(handler)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.srv.Close()
			ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			names := make(chan string, 1)
			go func() {
				c, err := ln.AcceptTCP()
				if err != nil {
					return
				}
				name, peeked := peekName(c, tc.port, 2*time.Second)
				names <- name
				up, err := net.Dial("tcp4", tc.srv.Listener.Addr().String())
				if err != nil {
					c.Close()
					return
				}
				up.Write(peeked)
				join(c, up.(*net.TCPConn))
			}()
			tr := &http.Transport{
				DialContext: func(context.Context, string, string) (net.Conn, error) {
					return net.Dial("tcp4", ln.Addr().String())
				},
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the peek is under test, not the certificate
			}
			defer tr.CloseIdleConnections()
			scheme := map[uint16]string{portHTTP: "http", portHTTPS: "https"}[tc.port]
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(scheme + "://replay.test/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("host=replay.test tls=%v", tc.port == portHTTPS); string(body) != want {
				t.Errorf("body = %q, want %q", body, want)
			}
			if name := <-names; name != "replay.test" {
				t.Errorf("peeked name = %q", name)
			}
		})
	}
}

// FuzzPeekName: whatever a client sends, a peek ends, within its limit,
// with a prefix of what was sent and a name that is "" or normalized.
func FuzzPeekName(f *testing.F) {
	f.Add(uint16(portHTTP), []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add(uint16(portHTTPS), []byte("\x16\x03\x01\x00\x2a\x01\x00\x00\x26\x03\x03"))
	f.Add(uint16(portHTTPS), []byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, port uint16, data []byte) {
		if port != portHTTP {
			port = portHTTPS
		}
		name, peeked := peekPipe(t, port, []string{string(data)}, true, time.Second)
		if name != "" && normalizeName(name) != name {
			t.Errorf("name %q is not normalized", name)
		}
		if !bytes.HasPrefix(data, peeked) || len(peeked) > peekLimit {
			t.Errorf("peeked %d bytes of %d", len(peeked), len(data))
		}
	})
}
