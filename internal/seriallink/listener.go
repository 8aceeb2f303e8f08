package seriallink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Config tunes the guest's end of a link.
type Config struct {
	// WaitHost is called when a read of the port found the host gone (0
	// bytes or io.EOF), before the port is read again; n counts such reads
	// in a row, from 1. It returns when the host may be back, or an error
	// that ends the listener. ctx ends when the listener is closed. The
	// default is Backoff.
	WaitHost func(ctx context.Context, n int) error
}

// maxBuffered bounds what a connection holds unread before the listener
// stops reading the port. yamux reads all the time, so it is rarely reached.
const maxBuffered = 256 << 10

// Listen starts the guest's end of a link over port, which must allow a
// Read and a Write at the same time. Accept returns a connection each time a
// new host connection shows up on the port, ending the connection before it.
//
// A goroutine reads the port until the listener is closed. It may stay
// blocked in a Read of the port after Close, until that Read returns.
func Listen(port io.ReadWriter, cfg Config) net.Listener {
	if cfg.WaitHost == nil {
		cfg.WaitHost = Backoff
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{
		fr:       newFrameReader(zeroIsEOF{port}, 0),
		fw:       newFrameWriter(port),
		waitHost: cfg.WaitHost,
		ctx:      ctx,
		cancel:   cancel,
		accept:   make(chan *conn),
		failed:   make(chan struct{}),
	}
	go l.run()
	return l
}

// Backoff sleeps for the nth read in a row that found no host: 1 ms,
// doubling up to 50 ms.
func Backoff(ctx context.Context, n int) error {
	d := min(time.Millisecond<<min(n-1, 6), 50*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// zeroIsEOF makes a read of 0 bytes what it means on a virtio-serial
// port: the host is not connected.
type zeroIsEOF struct{ io.Reader }

func (r zeroIsEOF) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if n == 0 && err == nil && len(p) > 0 {
		err = io.EOF
	}
	return n, err
}

type listener struct {
	fr       *frameReader // only run uses it
	fw       *frameWriter // shared by every connection
	waitHost func(context.Context, int) error

	ctx    context.Context // done once Close is called
	cancel context.CancelFunc
	accept chan *conn
	failed chan struct{} // closed when run ends with err
	err    error

	mu  sync.Mutex
	cur *conn // the connection being fed, so Close can end it
}

// run feeds the port's frames to the connections, one epoch at a time.
func (l *listener) run() {
	// Close ends the current connection too, but may come while run sets
	// up a new one.
	defer l.setCurrent(nil)
	var epoch uint32 // of the newest host connection; 0 before any
	gone := 0        // reads in a row that found the host gone
	for {
		e, payload, err := l.fr.next()
		if l.ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, io.EOF):
			// The driver says the host is away. That is news about the
			// port, not about a connection, and it may come late: a
			// hang-up and the next connection arrive back to back, and the
			// driver may report the hang-up after the new connection's
			// first bytes are in. So nothing read is dropped and the
			// current connection goes on; only a new epoch ends it.
			gone++
			if err := l.waitHost(l.ctx, gone); err != nil {
				if l.ctx.Err() == nil {
					l.fail(fmt.Errorf("seriallink: wait for host: %w", err))
				}
				return
			}
		case err != nil:
			l.fail(fmt.Errorf("seriallink: read port: %w", err))
			return
		case e != epoch:
			gone = 0
			epoch = e
			c := &conn{l: l, epoch: e}
			c.cond.L = &c.mu
			c.deliver(payload)
			l.setCurrent(c)
			select {
			case l.accept <- c:
			case <-l.ctx.Done():
				return
			}
		default:
			gone = 0
			if cur := l.current(); cur != nil {
				cur.deliver(payload)
			}
		}
	}
}

// setCurrent makes c the connection that gets the port's data, and ends
// the one before it.
func (l *listener) setCurrent(c *conn) {
	l.mu.Lock()
	old := l.cur
	l.cur = c
	l.mu.Unlock()
	if old != nil {
		old.hangup()
	}
}

func (l *listener) current() *conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

func (l *listener) fail(err error) {
	l.err = err
	close(l.failed)
}

// Accept waits for the next host connection.
func (l *listener) Accept() (net.Conn, error) {
	if l.ctx.Err() != nil {
		return nil, net.ErrClosed
	}
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.failed:
		return nil, l.err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops Accept and ends the current connection: nothing would feed
// it any more.
func (l *listener) Close() error {
	l.cancel()
	l.setCurrent(nil)
	return nil
}

func (l *listener) Addr() net.Addr { return addr("guest") }

// addr names an end of a link in logs; a link has no real address.
type addr string

func (addr) Network() string  { return "seriallink" }
func (a addr) String() string { return string(a) }

// conn is the guest's end of one host connection.
type conn struct {
	l     *listener
	epoch uint32

	mu     sync.Mutex
	cond   sync.Cond // on mu: buf, hungUp or closed changed
	buf    bytes.Buffer
	hungUp bool // no more data comes: a newer host connection, or none
	closed bool
}

// deliver hands p to the connection's reader. It waits while the reader
// is behind, unless the connection ends; then p is dropped.
func (c *conn) deliver(p []byte) {
	if len(p) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.buf.Len() >= maxBuffered && !c.hungUp && !c.closed {
		c.cond.Wait()
	}
	if c.hungUp || c.closed {
		return
	}
	c.buf.Write(p)
	c.cond.Broadcast()
}

// hangup ends the connection from the host's side: Read returns what is
// buffered, then io.EOF.
func (c *conn) hangup() {
	c.mu.Lock()
	c.hungUp = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.buf.Len() == 0 && !c.hungUp && !c.closed {
		c.cond.Wait()
	}
	switch {
	case c.closed:
		return 0, net.ErrClosed
	case c.buf.Len() == 0:
		return 0, io.EOF
	}
	n, _ := c.buf.Read(p)
	c.cond.Broadcast()
	return n, nil
}

// Write sends p to the host. A connection ended by a newer one stops
// between frames; what it already sent the new host skips.
func (c *conn) Write(p []byte) (int, error) {
	return c.l.fw.write(c.epoch, p, c.check)
}

func (c *conn) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hungUp || c.closed {
		return net.ErrClosed
	}
	return nil
}

func (c *conn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.buf = bytes.Buffer{}
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return addr("guest") }
func (c *conn) RemoteAddr() net.Addr { return addr(fmt.Sprintf("host/%08x", c.epoch)) }

// Deadlines are not supported: a Write blocks in the port, which nothing
// can interrupt, and yamux does not need them.
func (c *conn) SetDeadline(time.Time) error      { return os.ErrNoDeadline }
func (c *conn) SetReadDeadline(time.Time) error  { return os.ErrNoDeadline }
func (c *conn) SetWriteDeadline(time.Time) error { return os.ErrNoDeadline }
