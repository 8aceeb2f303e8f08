package mcp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type callerCtx struct{}

// bearerTransport sends every request with an API key.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestSessionsActAsTheirCaller checks that over HTTP a session's tool
// calls reach the API with its own key, that another key cannot use the
// session, and that CloseSessionsOf ends it.
func TestSessionsActAsTheirCaller(t *testing.T) {
	apis := map[string]*fakeAPI{"key-a": newFake(), "key-b": newFake()}
	ids := map[string]string{"key-a": "id-a", "key-b": "id-b"}
	apis["key-a"].add("")
	apis["key-b"].add("")
	apis["key-b"].add("")
	s := New(Config{API: newFake(),
		ForKey: func(k string) API { return apis[k] },
		Caller: func(ctx context.Context) string { id, _ := ctx.Value(callerCtx{}).(string); return id },
	})
	// What the daemon's auth does before /mcp: a known key, its id in ctx.
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		id, ok := ids[key]
		if !ok {
			http.Error(w, "wrong or revoked API key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerCtx{}, id)))
	}))
	t.Cleanup(srv.Close) // after the sessions' Close
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(key string) *sdk.ClientSession {
		t.Helper()
		tr := &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearerTransport{key}}, MaxRetries: -1}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	count := func(cs *sdk.ClientSession) (int, error) {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_sandboxes"})
		if err != nil {
			return 0, err
		}
		if res.IsError {
			return 0, errors.New(text(res))
		}
		m, _ := res.StructuredContent.(map[string]any)
		l, _ := m["sandboxes"].([]any)
		return len(l), nil
	}
	a, b := open("key-a"), open("key-b")
	for _, c := range []struct {
		name string
		cs   *sdk.ClientSession
		want int
	}{{"a", a, 1}, {"b", b, 2}} {
		if n, err := count(c.cs); err != nil || n != c.want {
			t.Fatalf("session %s lists %d sandboxes (%v), want %d", c.name, n, err, c.want)
		}
	}
	// sandbox_run's sandbox is made with the session's own key.
	if _, err := a.CallTool(ctx, &sdk.CallToolParams{Name: "sandbox_run", Arguments: map[string]any{"command": "true"}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := count(a); n != 2 {
		t.Fatalf("after sandbox_run, session a lists %d", n)
	}

	// Key b on a's session: refused.
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer key-b")
	req.Header.Set("Mcp-Session-Id", a.ID())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("key b on a's session: status %d, want 403", resp.StatusCode)
	}

	// Revoked: a's session ends, b's goes on.
	// A session opened by a caller that never called a tool is known too.
	idle := open("key-a")
	if n := s.CloseSessionsOf("id-a"); n != 2 {
		t.Fatalf("CloseSessionsOf closed %d sessions, want 2", n)
	}
	if err := idle.Ping(ctx, nil); err == nil {
		t.Fatal("the idle session of the revoked key still answers")
	}
	if _, err := count(a); err == nil {
		t.Fatal("a closed session still answers")
	}
	if n, err := count(b); err != nil || n != 2 {
		t.Fatalf("session b after a's end: %d, %v", n, err)
	}
	// Its sandbox_run sandbox is killed, through its own API.
	deadline := time.Now().Add(5 * time.Second)
	left := func() int {
		f := apis["key-a"]
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.sandboxes)
	}
	for left() != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := left(); got != 1 {
		t.Fatalf("a's sandbox_run sandbox not killed: %d left", got)
	}
}
