package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// dialTerminal opens a terminal's WebSocket with headers h (the API key
// unless h names Authorization).
func (s *testServer) dialTerminal(t *testing.T, id, query string, h hdr) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	header := http.Header{}
	if _, ok := h["Authorization"]; !ok {
		header.Set("Authorization", "Bearer "+testKey)
	}
	for k, v := range h {
		if v != "" {
			header.Set(k, v)
		}
	}
	return websocket.Dial(ctx, s.url+"/v1/sandboxes/"+id+"/pty?"+query, &websocket.DialOptions{HTTPHeader: header})
}

func TestTerminal(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	q := url.Values{"cols": {"90"}, "rows": {"20"}, "cwd": {"/"}, "env": {"A=1"},
		"cmd": {"sh", "-c", "stty size; read x; echo got=$x$A; sleep 100; echo done"}}
	c, _, err := s.dialTerminal(t, sb.ID, q.Encode(), tok(sb))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out strings.Builder
	var exit *apitype.TerminalEvent
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v; output so far %q", err, out.String())
			}
			if typ == websocket.MessageBinary {
				out.Write(msg)
				continue
			}
			var ev apitype.TerminalEvent
			if err := json.Unmarshal(msg, &ev); err != nil {
				t.Fatalf("text message %q: %v", msg, err)
			}
			switch ev.Type {
			case apitype.TerminalExit:
				exit = &ev
				return
			case apitype.TerminalError:
				out.WriteString("[error " + ev.Code + "]")
			}
		}
	}
	readUntil("20 90")
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":0,"rows":5}`))
	readUntil("[error bad_request]")
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"wiggle"}`))
	readUntil("[error bad_request]")
	c.Write(ctx, websocket.MessageBinary, []byte("hello\n"))
	readUntil("got=hello1")
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"signal","signal":"TERM"}`)) // the sleep, in the foreground
	readUntil("\x00never")
	if exit == nil || exit.ExitCode == nil || *exit.ExitCode != -1 || exit.Signal != "SIGTERM" {
		t.Fatalf("exit %+v, want -1 and SIGTERM (sh -c runs its last command in its own place)", exit)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the exit: %v, want a normal close", err)
	}
}

func TestTerminalRefused(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	other := s.create(t)
	for _, tc := range []struct {
		name, id, query string
		h               hdr
		want            int
	}{
		{"zero cols", sb.ID, "cols=0", tok(sb), http.StatusBadRequest},
		{"negative rows", sb.ID, "rows=-3", tok(sb), http.StatusBadRequest},
		{"huge cols", sb.ID, "cols=100000", tok(sb), http.StatusBadRequest},
		{"cols not a number", sb.ID, "cols=wide", tok(sb), http.StatusBadRequest},
		{"unknown command", sb.ID, "cmd=no-such-command-cove", tok(sb), http.StatusBadRequest},
		{"unknown user", sb.ID, "user=nobody-here", tok(sb), http.StatusBadRequest},
		{"unknown sandbox", "sb-000000000000", "", tok(sb), http.StatusNotFound},
		{"wrong token", sb.ID, "", tok(other), http.StatusForbidden},
		{"no token", sb.ID, "", nil, http.StatusForbidden},
		{"wrong key", sb.ID, "", hdr{"Authorization": "Bearer nope", apitype.SandboxTokenHeader: sb.Token}, http.StatusUnauthorized},
	} {
		_, resp, err := s.dialTerminal(t, tc.id, tc.query, tc.h)
		if err == nil || resp == nil || resp.StatusCode != tc.want {
			code := 0
			if resp != nil {
				code = resp.StatusCode
			}
			t.Errorf("%s: status %d, %v; want %d", tc.name, code, err, tc.want)
		}
	}
	// Not a WebSocket: a 400 that says what to use.
	resp, body := s.doString(t, "GET", "/v1/sandboxes/"+sb.ID+"/pty", "", tok(sb))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "WebSocket") {
		t.Errorf("plain GET: %d %s", resp.StatusCode, body)
	}
}
