package seriallink

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agent"
	"github.com/cove-sandbox/cove/internal/agentproto"
)

// timeout bounds every wait, so that a hang fails a test rather than the
// whole run.
const timeout = 30 * time.Second

// listen starts a guest end on port and stops it when t ends.
func listen(t *testing.T, port io.ReadWriter, cfg Config) net.Listener {
	t.Helper()
	l := Listen(port, cfg)
	t.Cleanup(func() { l.Close() })
	return l
}

// within runs f and fails t if it does not return in time.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("%s: timed out", what)
		panic("not reached")
	}
}

type acceptResult struct {
	c   net.Conn
	err error
}

func accept(t *testing.T, l net.Listener) *conn {
	t.Helper()
	r := within(t, "accept", func() acceptResult {
		c, err := l.Accept()
		return acceptResult{c, err}
	})
	if r.err != nil {
		t.Fatalf("accept: %v", r.err)
	}
	return r.c.(*conn)
}

func client(t *testing.T, c net.Conn) *clientConn {
	t.Helper()
	cc, err := Client(c)
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc.(*clientConn)
}

// exchange sends size random bytes each way at once, in writes of random
// sizes, and checks that they arrive intact.
func exchange(t *testing.T, host, guest net.Conn, size int) {
	t.Helper()
	var wg sync.WaitGroup
	send := func(c net.Conn, b []byte) {
		wg.Go(func() {
			for len(b) > 0 {
				n := min(len(b), 1+mrand.IntN(3*MaxPayload))
				if _, err := c.Write(b[:n]); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				b = b[n:]
			}
		})
	}
	recv := func(c net.Conn, want []byte) {
		wg.Go(func() {
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Errorf("read: %v", err)
				return
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%d bytes arrived different", len(want))
			}
		})
	}
	up, down := randBytes(size), randBytes(size)
	send(host, up)
	send(guest, down)
	recv(guest, up)
	recv(host, down)
	within(t, "exchange", func() struct{} { wg.Wait(); return struct{}{} })
}

// drain reads c to its end, which must come.
func drain(t *testing.T, c net.Conn) error {
	t.Helper()
	return within(t, "drain", func() error {
		_, err := io.Copy(io.Discard, c)
		return err
	})
}

// transports returns the guest's port and the host's conn on a stream.
var transports = []struct {
	name string
	open func(t *testing.T) (port io.ReadWriter, host net.Conn)
}{
	{"fake port", func(t *testing.T) (io.ReadWriter, net.Conn) {
		p := newFakePort()
		t.Cleanup(func() { p.fail(errPortGone) })
		return p, p.connect()
	}},
	{"net.Pipe", func(t *testing.T) (io.ReadWriter, net.Conn) {
		g, h := net.Pipe()
		t.Cleanup(func() { g.Close(); h.Close() })
		return g, h
	}},
	{"socketpair", func(t *testing.T) (io.ReadWriter, net.Conn) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		var conns [2]net.Conn
		for i, fd := range fds {
			f := os.NewFile(uintptr(fd), "socketpair")
			c, err := net.FileConn(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conns[i] = c
		}
		return conns[0], conns[1]
	}},
}

func TestRoundTrip(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			port, hostConn := tr.open(t)
			l := listen(t, port, Config{})
			host := client(t, hostConn)
			guest := accept(t, l)
			if guest.epoch != host.epoch {
				t.Fatalf("guest epoch %08x, host %08x", guest.epoch, host.epoch)
			}
			exchange(t, host, guest, 4<<20)
		})
	}
}

// A VM restored from a snapshot: the guest has a connection, is in the
// middle of a frame from the old host and has written to it what it never
// read, and a new host connects without the guest seeing the old one go.
func TestRestore(t *testing.T) {
	port := newFakePort()
	t.Cleanup(func() { port.fail(errPortGone) })
	l := listen(t, port, Config{})
	c1 := client(t, port.connect())
	g1 := accept(t, l)
	exchange(t, c1, g1, 100<<10)

	// The snapshot.
	port.fromHost(frame(g1.epoch, randBytes(20000))[:5000])
	port.fromHost([]byte("garbage"))
	if _, err := g1.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	port.fromGuest(frame(g1.epoch, randBytes(MaxPayload))[:3000])
	port.fromGuest([]byte("more garbage CVL1"))

	// The clone's first host.
	c2 := client(t, port.connect())
	g2 := accept(t, l)
	if g2.epoch != c2.epoch || g2.epoch == g1.epoch {
		t.Fatalf("new guest conn has epoch %08x; old %08x, host %08x", g2.epoch, g1.epoch, c2.epoch)
	}
	if err := drain(t, g1); err != nil {
		t.Errorf("old conn: read to end: %v", err)
	}
	if _, err := g1.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("old conn: write: %v, want net.ErrClosed", err)
	}
	if err := drain(t, c1); err != nil {
		t.Errorf("old host: read to end: %v", err)
	}
	exchange(t, c2, g2, 1<<20)
}

// The host goes and comes back, twice, with the guest seeing it go or not.
func TestReconnect(t *testing.T) {
	for _, seen := range []bool{true, false} {
		name := map[bool]string{true: "disconnect seen", false: "disconnect missed"}[seen]
		t.Run(name, func(t *testing.T) {
			port := newFakePort()
			t.Cleanup(func() { port.fail(errPortGone) })
			var waits atomic.Int32
			l := listen(t, port, Config{WaitHost: func(ctx context.Context, n int) error {
				waits.Add(1)
				return Backoff(ctx, n)
			}})
			var prev *conn
			for i := range 3 {
				h := port.connect()
				c := client(t, h)
				if prev != nil && !seen {
					// What the old connection writes now must not reach
					// the new host.
					prev.Write([]byte("stale"))
				}
				g := accept(t, l)
				if prev != nil {
					if err := drain(t, prev); err != nil {
						t.Errorf("connection %d: old conn: %v", i, err)
					}
				}
				exchange(t, c, g, 200<<10)
				if seen {
					// The guest conn lives on until the next host's epoch
					// ends it (drained above, next round).
					before := waits.Load()
					h.Close()
					for deadline := time.Now().Add(10 * time.Second); waits.Load() == before; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							t.Fatalf("connection %d: the listener never saw the host leave", i)
						}
					}
				}
				prev = g
			}
			if seen && waits.Load() == 0 {
				t.Error("WaitHost never called")
			}
		})
	}
}

// A host leaving does not end the guest's conn: the driver may report the
// hang-up late, after the next host's first bytes. Late frames of the old
// epoch still reach the old conn; the next host's epoch ends it.
func TestEpochAfterDisconnect(t *testing.T) {
	port := newFakePort()
	t.Cleanup(func() { port.fail(errPortGone) })
	l := listen(t, port, Config{})
	h := port.connect()
	c := client(t, h)
	g := accept(t, l)
	h.Close()
	h = port.connect()
	port.fromHost(frame(c.epoch, []byte("late")))
	c2 := client(t, h)
	g2 := accept(t, l)
	if g2.epoch != c2.epoch {
		t.Fatalf("accepted epoch %08x, want %08x", g2.epoch, c2.epoch)
	}
	if b, err := io.ReadAll(g); err != nil || string(b) != "late" {
		t.Errorf("old conn read %q, %v; want the late frame, then EOF", b, err)
	}
	exchange(t, c2, g2, 1000)
}

func TestClose(t *testing.T) {
	tests := []struct {
		name string
		host bool // a host is connected; else the listener waits for one
	}{
		{"no host", false},
		{"silent host", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := newFakePort()
			t.Cleanup(func() { port.fail(errPortGone) })
			l := listen(t, port, Config{})
			var g *conn
			if tt.host {
				client(t, port.connect())
				g = accept(t, l)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := l.Accept()
				errc <- err
			}()
			time.Sleep(10 * time.Millisecond)
			l.Close()
			select {
			case err := <-errc:
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
				}
			case <-time.After(timeout):
				t.Fatal("Close did not unblock Accept")
			}
			if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
			}
			if g != nil {
				if err := drain(t, g); err != nil {
					t.Errorf("conn after Close: %v", err)
				}
			}
		})
	}
}

func TestAcceptErrors(t *testing.T) {
	errWait := errors.New("cannot wait")
	tests := []struct {
		name string
		// waitErr, if set, is what WaitHost returns once the port is
		// broken. Before that the guest may well find no host yet (the
		// listener reads the port before the host connects), which must
		// not fail it.
		waitErr error
		// breakPort breaks the link of the accepted conn.
		breakPort func(p *fakePort, h *fakeHost)
		want      error
	}{
		{
			name:      "read error",
			breakPort: func(p *fakePort, _ *fakeHost) { p.fail(errPortGone) },
			want:      errPortGone,
		},
		{
			name:      "wait error",
			waitErr:   errWait,
			breakPort: func(_ *fakePort, h *fakeHost) { h.Close() },
			want:      errWait,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var broken atomic.Bool
			cfg := Config{WaitHost: func(ctx context.Context, n int) error {
				if broken.Load() && tt.waitErr != nil {
					return tt.waitErr
				}
				return Backoff(ctx, n)
			}}
			port := newFakePort()
			t.Cleanup(func() { port.fail(errPortGone) })
			l := listen(t, port, cfg)
			h := port.connect()
			client(t, h)
			g := accept(t, l)
			broken.Store(true)
			tt.breakPort(port, h)
			r := within(t, "accept", func() acceptResult {
				c, err := l.Accept()
				return acceptResult{c, err}
			})
			if !errors.Is(r.err, tt.want) {
				t.Errorf("Accept: %v, want %v", r.err, tt.want)
			}
			if err := drain(t, g); err != nil {
				t.Errorf("conn: %v", err)
			}
		})
	}
}

// A closed conn that is not read must not stall the port: its data is
// dropped.
func TestClosedConnDoesNotStall(t *testing.T) {
	port := newFakePort()
	t.Cleanup(func() { port.fail(errPortGone) })
	l := listen(t, port, Config{})
	c1 := client(t, port.connect())
	g1 := accept(t, l)
	g1.Close()
	if _, err := g1.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
	// Far more than a conn buffers.
	within(t, "write to closed guest", func() error {
		_, err := c1.Write(make([]byte, 4*maxBuffered))
		return err
	})
	c2 := client(t, port.connect())
	g2 := accept(t, l)
	exchange(t, c2, g2, 1000)
}

// The whole agent protocol over a link, across a restore and a reconnect.
func TestAgentproto(t *testing.T) {
	port := newFakePort()
	l := Listen(port, Config{})
	a := agent.New(agent.Config{
		WorkDir:  t.TempDir(),
		Hostname: func() (string, error) { return "vm", nil },
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	served := make(chan error, 1)
	go func() { served <- agentproto.Serve(ctx, l, a, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		<-served
		a.Close()
		port.fail(errPortGone)
	})

	dial := func() (*agentproto.Client, *fakeHost) {
		t.Helper()
		h := port.connect()
		conn, err := Client(h)
		if err != nil {
			t.Fatal(err)
		}
		c, err := agentproto.NewClient(conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, h
	}
	content := randBytes(5 << 20)
	roundTrip := func(c *agentproto.Client, path string) {
		t.Helper()
		if _, err := c.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		if _, err := c.Put(ctx, agentproto.PutRequest{Path: path}, bytes.NewReader(content)); err != nil {
			t.Fatalf("put: %v", err)
		}
		_, rc, err := c.Get(ctx, agentproto.GetRequest{Path: path})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("get: %d bytes, %v; want the %d put", len(got), err, len(content))
		}
	}

	c1, _ := dial()
	roundTrip(c1, "one")

	// Restore: the agent is in the middle of a frame and the old host is
	// gone without the guest seeing it.
	port.fromHost(frame(l.(*listener).current().epoch, randBytes(MaxPayload))[:10000])
	c2, h2 := dial()
	roundTrip(c2, "two")
	select {
	case <-c1.Closed():
	case <-time.After(timeout):
		t.Error("old client still open")
	}

	// The daemon restarts.
	h2.Close()
	c3, _ := dial()
	roundTrip(c3, "three")
}
