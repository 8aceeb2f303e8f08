package preview

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// echoServer reads until its client half-closes, then answers "echo:"
// and what it read, and closes: it needs half-close both ways.
func echoServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := io.ReadAll(c)
				if err != nil {
					return
				}
				c.Write(append([]byte("echo:"), b...))
			}()
		}
	}()
	return l.Addr().String()
}

// tunnelServer tunnels every request to addr and reports each handler's
// end on done, and the requests' X-Test headers on seen.
func tunnelServer(t *testing.T, addr string) (url string, done, seen chan string) {
	done, seen = make(chan string, 8), make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- r.URL.Path }()
		seen <- r.Header.Get("X-Test")
		c, err := net.Dial("tcp", addr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		Tunnel(w, r, c)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(srv.Close)
	return srv.URL, done, seen
}

func TestTunnel(t *testing.T) {
	url, done, seen := tunnelServer(t, echoServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, msg := range []string{"hello", strings.Repeat("0123456789", 100_000)} {
		c, err := DialTunnel(ctx, url+"/connect", http.Header{"X-Test": {"yes"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-seen; got != "yes" {
			t.Errorf("the server saw X-Test %q", got)
		}
		go func() {
			io.WriteString(c, msg)
			c.(interface{ CloseWrite() error }).CloseWrite()
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != "echo:"+msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Tunnel did not return after both ends closed")
		}
	}
}

// TestTunnelClientCloses checks that a client going away ends Tunnel, and
// the upstream connection with it.
func TestTunnelClientCloses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	upClosed := make(chan struct{})
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
		close(upClosed)
	}()
	url, done, _ := tunnelServer(t, l.Addr().String())
	c, err := DialTunnel(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	c.Close()
	for _, ch := range []<-chan struct{}{upClosed, chanOf(done)} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("the tunnel outlived its client")
		}
	}
}

func chanOf(c <-chan string) <-chan struct{} {
	out := make(chan struct{})
	go func() { <-c; close(out) }()
	return out
}

// TestDialTunnelBuffered checks that bytes the server sends in the same
// packet as its 101 are read first from the tunnel.
func TestDialTunnelBuffered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: cove-tcp\r\n\r\nbanner\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "got "+line)
	}))
	defer srv.Close()
	c, err := DialTunnel(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if line, _ := br.ReadString('\n'); line != "banner\n" {
		t.Fatalf("first line %q", line)
	}
	io.WriteString(c, "ping\n")
	if line, _ := br.ReadString('\n'); line != "got ping\n" {
		t.Fatalf("answer %q", line)
	}
	if _, ok := c.(interface{ CloseWrite() error }); !ok {
		t.Error("the tunnel cannot half-close")
	}
}

func TestDialTunnelRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/forbidden":
			http.Error(w, `{"error":"wrong token","code":"forbidden"}`, http.StatusForbidden)
		case "/wrong-protocol":
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "websocket")
			w.WriteHeader(http.StatusSwitchingProtocols)
		case "/hang":
			<-r.Context().Done()
		default:
			Tunnel(w, r, nopConn{})
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	_, err := DialTunnel(ctx, srv.URL+"/forbidden", nil)
	var ue *UpgradeError
	if !errors.As(err, &ue) || ue.Response.StatusCode != http.StatusForbidden {
		t.Fatalf("forbidden: %v", err)
	}
	if body, _ := io.ReadAll(ue.Response.Body); !strings.Contains(string(body), "wrong token") {
		t.Errorf("refusal body %q", body)
	}

	if _, err := DialTunnel(ctx, srv.URL+"/wrong-protocol", nil); err == nil || !strings.Contains(err.Error(), "websocket") {
		t.Errorf("wrong protocol: %v", err)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := DialTunnel(short, srv.URL+"/hang", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("hang took %s", d)
	}

	for _, u := range []string{"ftp://x/", "::", "http://127.0.0.1:1/"} {
		if _, err := DialTunnel(ctx, u, nil); err == nil {
			t.Errorf("DialTunnel(%q) did not fail", u)
		}
	}

	// A plain request to a tunnel endpoint is refused, and the connection
	// it was given closed.
	resp, err := http.Get(srv.URL + "/plain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain GET: %d", resp.StatusCode)
	}
}

func TestIsTunnelRequest(t *testing.T) {
	for _, tc := range []struct {
		method, conn, upgrade string
		want                  bool
	}{
		{"GET", "Upgrade", "cove-tcp", true},
		{"GET", "keep-alive, upgrade", "COVE-TCP", true},
		{"GET", "", "cove-tcp", false},
		{"GET", "Upgrade", "websocket", false},
		{"POST", "Upgrade", "cove-tcp", false},
	} {
		r := httptest.NewRequest(tc.method, "/", nil)
		r.Header.Set("Connection", tc.conn)
		r.Header.Set("Upgrade", tc.upgrade)
		if got := IsTunnelRequest(r); got != tc.want {
			t.Errorf("%s Connection %q Upgrade %q: %v", tc.method, tc.conn, tc.upgrade, got)
		}
	}
}

// nopConn is a connection that is never used.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
