package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// writerFunc is an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestBuildSnapshotStreams(t *testing.T) {
	seen := make(chan struct{})
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
		io.WriteString(w, `{"output":"step 1\n"}`+"\n")
		w.(http.Flusher).Flush()
		// The rest only once the client has passed the first line on.
		select {
		case <-seen:
			io.WriteString(w, `{"output":"step 2\n"}`+"\n"+`{"snapshot":{"tag":"py","depth":0,"network":{"allow_domains":["pypi.org"]}}}`+"\n")
		case <-time.After(5 * time.Second):
			io.WriteString(w, `{"error":{"error":"the output was not streamed","code":"internal"}}`+"\n")
		}
	}))
	defer srv.Close()
	var out strings.Builder
	once := sync.Once{}
	w := writerFunc(func(p []byte) (int, error) {
		out.Write(p)
		once.Do(func() { close(seen) })
		return len(p), nil
	})
	c := New(srv.URL, testKey)
	si, err := c.BuildSnapshot(context.Background(), apitype.CreateSnapshotRequest{Tag: "py"}, w)
	if err != nil || si.Tag != "py" || len(si.Network.AllowDomains) != 1 {
		t.Fatalf("BuildSnapshot = %+v, %v", si, err)
	}
	if out.String() != "step 1\nstep 2\n" {
		t.Errorf("output %q", out.String())
	}
	if !strings.Contains(accept, apitype.ContentTypeNDJSON) {
		t.Errorf("Accept %q", accept)
	}
}

func TestBuildSnapshotAnswers(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		wantTag     string
		wantErr     error
		wantOutput  string
	}{
		{"an error after output", 200, apitype.ContentTypeNDJSON,
			`{"output":"pip: no such package\n"}` + "\n" + `{"error":{"error":"warm command exited 1","code":"bad_request"}}` + "\n",
			"", ErrBadRequest, "pip: no such package\n"},
		{"a stream cut short", 200, apitype.ContentTypeNDJSON, `{"output":"half"}` + "\n", "", io.ErrUnexpectedEOF, "half"},
		{"a torn line", 200, apitype.ContentTypeNDJSON, `{"output":"ha`, "", io.ErrUnexpectedEOF, ""},
		{"a daemon that does not stream", 201, "application/json", `{"tag":"py"}`, "py", nil, ""},
		{"refused", 409, "application/json", `{"error":"snapshot py exists","code":"conflict"}`, "", ErrConflict, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			var out strings.Builder
			si, err := New(srv.URL, testKey).BuildSnapshot(context.Background(), apitype.CreateSnapshotRequest{Tag: "py"}, &out)
			if si.Tag != tt.wantTag || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("BuildSnapshot = %+v, %v; want tag %q, error %v", si, err, tt.wantTag, tt.wantErr)
			}
			if out.String() != tt.wantOutput {
				t.Errorf("output %q, want %q", out.String(), tt.wantOutput)
			}
		})
	}
	// A streamed error reads as the daemon's own answer would.
	e := streamError(apitype.ErrorBody{Error: "warm command exited 1", Code: apitype.CodeBadRequest})
	if e.Status != 400 || e.Error() != "warm command exited 1 (400 Bad Request)" {
		t.Errorf("streamed error %+v: %s", e, e)
	}
}

// tunnelDaemon answers the tunnel route of sandbox s1's port 8000 as the
// daemon does, with an echo server behind it; anything else is refused.
func tunnelDaemon(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, code, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":%q,"code":%q}`, msg, code)
		}
		switch {
		case r.Header.Get(apitype.SandboxTokenHeader) != testToken:
			fail(403, apitype.CodeForbidden, "wrong sandbox token")
			return
		case r.URL.Path == "/v1/sandboxes/s1/ports/9/connect":
			fail(502, apitype.CodeBadGateway, "nothing answers on port 9")
			return
		case r.URL.Path != "/v1/sandboxes/s1/ports/8000/connect" || !strings.EqualFold(r.Header.Get("Upgrade"), "cove-tcp"):
			fail(404, apitype.CodeNotFound, "no route")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: cove-tcp\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // echo until the client's end
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDialPort(t *testing.T) {
	srv := tunnelDaemon(t)
	c := New(srv.URL, testKey)
	ctx := context.Background()
	conn, err := c.DialPort(ctx, "s1", testToken, 8000)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo = %q, %v", buf, err)
	}
	for _, tc := range []struct {
		token string
		port  int
		want  error
	}{
		{"nope", 8000, ErrForbidden},
		{testToken, 9, ErrBadGateway},
	} {
		if conn, err := c.DialPort(ctx, "s1", tc.token, tc.port); !errors.Is(err, tc.want) {
			t.Errorf("DialPort(%s, %d) = %v, %v; want %v", tc.token, tc.port, conn, err, tc.want)
		}
	}
}

// forwardSetup is a client of tunnelDaemon and a listener to forward.
func forwardSetup(t *testing.T) (*Client, net.Listener) {
	t.Helper()
	c := New(tunnelDaemon(t).URL, testKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

func TestPortForward(t *testing.T) {
	c, l := forwardSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.PortForward(ctx, l, "s1", testToken, 8000, func(err error) { t.Errorf("a tunnel failed: %v", err) })
	}()

	// Connections at once, each its own tunnel.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			msg := fmt.Sprintf("hello %d", i)
			io.WriteString(conn, msg)
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != msg {
				t.Errorf("through the forward: %q, %v; want %q", buf, err, msg)
			}
		}()
	}
	wg.Wait()

	// One held open ends with the forward.
	held, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	io.WriteString(held, "x")
	held.SetDeadline(time.Now().Add(5 * time.Second))
	io.ReadFull(held, make([]byte, 1))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("PortForward = %v, want nil once ctx ends", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PortForward did not return after ctx ended")
	}
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Error("a connection outlived the forward")
	}
	if conn, err := net.Dial("tcp", l.Addr().String()); err == nil {
		conn.Close()
		t.Error("the listener outlived the forward")
	}
}

func TestPortForwardRefused(t *testing.T) {
	c, l := forwardSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	go c.PortForward(ctx, l, "s1", "wrong", 8000, func(err error) { errs <- err })
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("a refused tunnel's connection stayed open")
	}
	if err := <-errs; !errors.Is(err, ErrForbidden) {
		t.Errorf("onError got %v, want forbidden", err)
	}
}
