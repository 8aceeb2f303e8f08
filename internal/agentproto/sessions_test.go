package agentproto

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"
)

// A Restored call closes the agent's other connections, those from before
// its checkpoint, and leaves its own; without Restored none is closed.
func TestRestoredClosesOtherSessions(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, l, stubHandler{}, slog.Default())
	dial := func() *Client {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewClient(conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	cctx := boundedCtx(t)
	old, other, fresh := dial(), dial(), dial()
	for _, c := range []*Client{old, other, fresh} {
		if _, err := c.Ping(cctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := fresh.Restored(cctx, RestoredRequest{}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Client{"old": old, "other": other} {
		select {
		case <-c.Closed():
		case <-time.After(10 * time.Second):
			t.Errorf("the %s connection is still open after a Restored call on another", name)
		}
	}
	if _, err := fresh.Ping(cctx); err != nil {
		t.Errorf("the connection Restored came on: %v", err)
	}
}
