package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fakeTerminal serves /v1/sandboxes/sb-1/pty as the daemon does: it
// answers each message in words and ends with exit code 3 at "exit".
func fakeTerminal(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb-1/pty" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(apitype.ErrorBody{Error: "no sandbox", Code: apitype.CodeNotFound})
			return
		}
		if r.Header.Get(apitype.SandboxTokenHeader) != "tok" {
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(apitype.ErrorBody{Error: "wrong token", Code: apitype.CodeForbidden})
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		q := r.URL.Query()
		c.Write(ctx, websocket.MessageBinary, fmt.Appendf(nil, "size %sx%s cmd %q env %q\n", q.Get("cols"), q.Get("rows"), q["cmd"], q["env"]))
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageText {
				var m apitype.TerminalControl
				json.Unmarshal(msg, &m)
				if m.Type == "signal" && m.Signal == "BOGUS" {
					c.Write(ctx, websocket.MessageText, []byte(`{"type":"error","error":"no signal named BOGUS","code":"bad_request"}`))
					continue
				}
				c.Write(ctx, websocket.MessageBinary, fmt.Appendf(nil, "%s %d %d %s\n", m.Type, m.Cols, m.Rows, m.Signal))
				continue
			}
			if string(msg) == "exit" {
				code := 3
				b, _ := json.Marshal(apitype.TerminalEvent{Type: apitype.TerminalExit, ExitCode: &code})
				c.Write(ctx, websocket.MessageText, b)
				c.Close(websocket.StatusNormalClosure, "")
				return
			}
			c.Write(ctx, websocket.MessageBinary, append([]byte("typed "), msg...))
		}
	}))
}

func TestTerminal(t *testing.T) {
	srv := fakeTerminal(t)
	defer srv.Close()
	c := New(srv.URL, "key")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := c.Terminal(ctx, "sb-2", "tok", TerminalOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
	if _, err := c.Terminal(ctx, "sb-1", "nope", TerminalOptions{}); !errors.Is(err, ErrForbidden) {
		t.Errorf("wrong token: %v, want ErrForbidden", err)
	}

	var refused []string
	// The dial's context bounds only the dial: the session outlives it.
	dialCtx, dialCancel := context.WithCancel(ctx)
	s, err := c.Terminal(dialCtx, "sb-1", "tok", TerminalOptions{Cols: 100, Rows: 30, Cmd: []string{"top", "-b"},
		Env: map[string]string{"B": "2", "A": "1"}, OnError: func(m string) { refused = append(refused, m) }})
	dialCancel()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	defer s.Close()
	s.Resize(120, 40)
	s.Signal("BOGUS")
	s.Signal("INT")
	s.Write([]byte("ls\n"))
	s.Write([]byte("exit"))
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `size 100x30 cmd ["top" "-b"] env ["A=1" "B=2"]` + "\nresize 120 40 \nsignal 0 0 INT\ntyped ls\n"
	if string(out) != want {
		t.Errorf("output:\n%q\nwant\n%q", out, want)
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "BOGUS") {
		t.Errorf("refused control messages %q", refused)
	}
	if st, err := s.Wait(); err != nil || st.ExitCode != 3 {
		t.Errorf("Wait = %+v, %v; want exit 3", st, err)
	}
}

// TestTerminalCut: a connection that ends before the exit is an error,
// not an end of output.
func TestTerminalCut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.Write(r.Context(), websocket.MessageBinary, []byte("partial"))
		c.CloseNow()
	}))
	defer srv.Close()
	s, err := New(srv.URL, "key").Terminal(context.Background(), "sb-1", "tok", TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := io.ReadAll(s)
	if string(out) != "partial" || err == nil {
		t.Errorf("ReadAll = %q, %v; want the output and an error", out, err)
	}
	if _, err := s.Wait(); err == nil {
		t.Error("Wait after a cut: no error")
	}
}
