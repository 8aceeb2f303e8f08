package seriallink

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// fakePort is a virtio-serial port as the guest sees it, with a host side
// that connects and disconnects like QEMU's chardev socket. As with the
// real port, a guest read returns what the host sent, then io.EOF while no
// host is connected; guest writes are kept for whichever host reads next,
// so a new host gets what the guest wrote to the old one and it has not
// read.
type fakePort struct {
	mu   sync.Mutex
	cond sync.Cond
	in   bytes.Buffer // host to guest
	out  bytes.Buffer // guest to host
	host *fakeHost    // connected, or nil
	err  error        // every guest read fails with it
}

func newFakePort() *fakePort {
	p := &fakePort{}
	p.cond.L = &p.mu
	return p
}

func (p *fakePort) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.in.Len() == 0 && p.host != nil && p.err == nil {
		p.cond.Wait()
	}
	switch {
	case p.err != nil:
		return 0, p.err
	case p.in.Len() == 0:
		return 0, io.EOF
	}
	return p.in.Read(b)
}

func (p *fakePort) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cond.Broadcast()
	return p.out.Write(b)
}

// connect connects a new host. If one is connected it is cut off without
// the guest ever seeing the port without a host: a missed notification, or
// a restored clone.
func (p *fakePort) connect() *fakeHost {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &fakeHost{p: p}
	p.host = h
	p.cond.Broadcast()
	return h
}

// fromHost queues raw bytes for the guest, as if the host had sent them.
func (p *fakePort) fromHost(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.in.Write(b)
	p.cond.Broadcast()
}

// fromGuest queues raw bytes for the host, as if the guest had written them.
func (p *fakePort) fromGuest(b []byte) { p.Write(b) }

// fail makes guest reads fail with err, which also ends a blocked one.
func (p *fakePort) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
	p.cond.Broadcast()
}

// connected reports whether h is the connected host.
func (p *fakePort) connected(h *fakeHost) bool { return p.host == h && !h.closed }

// fakeHost is the host's end of a fakePort: a client of the chardev socket.
type fakeHost struct {
	p      *fakePort
	closed bool // guarded by p.mu
}

var _ net.Conn = (*fakeHost)(nil)

func (h *fakeHost) Read(b []byte) (int, error) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.out.Len() == 0 && p.connected(h) {
		p.cond.Wait()
	}
	if !p.connected(h) {
		return 0, io.EOF
	}
	return p.out.Read(b)
}

func (h *fakeHost) Write(b []byte) (int, error) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.connected(h) {
		return 0, net.ErrClosed
	}
	p.cond.Broadcast()
	return p.in.Write(b)
}

// Close disconnects the host; the guest sees it.
func (h *fakeHost) Close() error {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	h.closed = true
	if p.host == h {
		p.host = nil
	}
	p.cond.Broadcast()
	return nil
}

type fakeAddr struct{}

func (fakeAddr) Network() string { return "fake" }
func (fakeAddr) String() string  { return "fake" }

func (h *fakeHost) LocalAddr() net.Addr            { return fakeAddr{} }
func (h *fakeHost) RemoteAddr() net.Addr           { return fakeAddr{} }
func (h *fakeHost) SetDeadline(time.Time) error    { return os.ErrNoDeadline }
func (*fakeHost) SetReadDeadline(time.Time) error  { return os.ErrNoDeadline }
func (*fakeHost) SetWriteDeadline(time.Time) error { return os.ErrNoDeadline }

var errPortGone = errors.New("port gone")
