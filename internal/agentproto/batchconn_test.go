package agentproto

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// gateConn records each Write; while gate is set, Writes wait for it.
type gateConn struct {
	net.Conn // nil: only Write and Close are used
	mu       sync.Mutex
	writes   [][]byte
	gate     chan struct{}
	entered  chan struct{} // a Write has started
	err      error
	closed   bool
}

func (c *gateConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	gate, err := c.gate, c.err
	c.mu.Unlock()
	if c.entered != nil {
		select {
		case c.entered <- struct{}{}:
		default:
		}
	}
	if gate != nil {
		<-gate
	}
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.writes = append(c.writes, bytes.Clone(p))
	c.mu.Unlock()
	return len(p), nil
}

func (c *gateConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *gateConn) snapshot() ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.writes...), c.closed
}

// waitWrites waits until the conn has seen n writes.
func (c *gateConn) waitWrites(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w, _ := c.snapshot()
		if len(w) >= n {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes reached the conn, want %d", len(w), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchConnCoalesces: writes made while the conn is busy go out
// together in the next write, in order; a plain conn would take four.
func TestBatchConnCoalesces(t *testing.T) {
	c := &gateConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	b := newBatchConn(c)
	defer b.Close()
	if _, err := b.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	<-c.entered // the flusher holds "a" in a Write that waits
	for _, s := range []string{"b", "c", "d"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	close(c.gate)
	w := c.waitWrites(t, 2)
	time.Sleep(20 * time.Millisecond) // room for a stray third write
	w, _ = c.snapshot()
	if len(w) != 2 || string(w[0]) != "a" || string(w[1]) != "bcd" {
		t.Fatalf("writes %q, want [a bcd]", w)
	}
}

// TestBatchConnFlushesAlone: a lone small write reaches the conn with no
// later write to push it out.
func TestBatchConnFlushesAlone(t *testing.T) {
	c := &gateConn{}
	b := newBatchConn(c)
	defer b.Close()
	b.Write([]byte("ping"))
	if w := c.waitWrites(t, 1); string(w[0]) != "ping" {
		t.Fatalf("wrote %q", w[0])
	}
}

// TestBatchConnLarge: a write over the limit goes out from the writer,
// after what was held, in order.
func TestBatchConnLarge(t *testing.T) {
	c := &gateConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	b := newBatchConn(c)
	defer b.Close()
	b.Write([]byte("a"))
	<-c.entered
	b.Write([]byte("b"))
	big := bytes.Repeat([]byte("x"), batchLimit+1)
	done := make(chan error, 1)
	go func() { _, err := b.Write(big); done <- err }()
	close(c.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w := c.waitWrites(t, 3)
	got := bytes.Join(w, nil)
	if want := append([]byte("ab"), big...); !bytes.Equal(got, want) {
		t.Fatalf("wrote %d bytes out of order (%d writes)", len(got), len(w))
	}
}

// TestBatchConnError: a failed write closes the conn, and every later
// Write reports the error.
func TestBatchConnError(t *testing.T) {
	boom := errors.New("boom")
	c := &gateConn{err: boom}
	b := newBatchConn(c)
	b.Write([]byte("a"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, closed := c.snapshot(); closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the conn was not closed after a failed write")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Write([]byte("b")); !errors.Is(err, boom) {
		t.Fatalf("Write after a failure: %v, want %v", err, boom)
	}
}

// countConn counts the writes that reach a conn.
type countConn struct {
	net.Conn
	mu sync.Mutex
	n  int
}

func (c *countConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestPingWrites counts the writes a ping costs each end over TCP: with a
// plain conn, a frame's header and payload written apart and a stream per
// call it took 6 on each side (open, 2 each for a frame's header and
// payload, close); with the lane but no batching, 2 (yamux's header and
// body); batched, 1.
func TestPingWrites(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := make(chan *countConn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		cc := &countConn{Conn: c}
		srv <- cc
		ServeConn(ctx, cc, stubHandler{})
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	host := &countConn{Conn: raw}
	c, err := NewClient(host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	guest := <-srv
	time.Sleep(10 * time.Millisecond)
	h0, g0 := host.count(), guest.count()
	const n = 200
	for range n {
		if _, err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	hw, gw := float64(host.count()-h0)/n, float64(guest.count()-g0)/n
	t.Logf("writes per ping: host %.2f, agent %.2f", hw, gw)
	if hw > 1.8 || gw > 1.8 {
		t.Errorf("writes per ping: host %.2f, agent %.2f; want at most 1.8", hw, gw)
	}
}
