package agentproto

import (
	"net"
	"runtime"
	"sync"
)

// batchLimit is how many bytes batchConn holds before a Write goes to the
// conn at once, from the writer: past it there is nothing to gain from
// waiting, and the writer feels the conn's back pressure as it should.
const batchLimit = 64 << 10

// batchYields bounds how often the flusher yields, waiting for more
// writes, before it writes what it holds.
const batchYields = 4

// batchConn coalesces small writes. yamux writes each frame's 12-byte
// header and its body separately, and a call's open, request, answer and
// close as separate frames; under gVisor every write to the agent's socket
// is a segment through the sandbox's user-space network stack, which costs
// far more than the copy. Small writes are appended to a buffer and return
// at once; a flusher goroutine writes the buffer as soon as the writer has
// nothing more to add (it yields to other goroutines until the buffer
// stops growing, a few times at most), so no byte waits for a later write.
// A write error closes the conn, which ends the session's reads too, and
// is returned by every later Write.
type batchConn struct {
	net.Conn

	wmu sync.Mutex // held while writing to Conn, so bytes keep their order

	mu    sync.Mutex
	buf   []byte // written by callers, not yet taken by a flush
	spare []byte // the buffer of the previous flush, for reuse
	err   error

	kick      chan struct{} // cap 1: buf holds bytes for the flusher
	done      chan struct{}
	closeOnce sync.Once
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go b.flusher()
	return b
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	if len(b.buf)+len(p) <= batchLimit {
		b.buf = append(b.buf, p...)
		b.mu.Unlock()
		select {
		case b.kick <- struct{}{}:
		default:
		}
		return len(p), nil
	}
	b.mu.Unlock()
	// Large: what is held, then p, in one write from here.
	b.wmu.Lock()
	defer b.wmu.Unlock()
	pending := b.take()
	var err error
	if len(pending) == 0 {
		_, err = b.Conn.Write(p)
	} else {
		bufs := net.Buffers{pending, p}
		_, err = bufs.WriteTo(b.Conn)
	}
	b.give(pending)
	if err != nil {
		b.fail(err)
		return 0, err
	}
	return len(p), nil
}

// take returns what the buffer holds and empties it.
func (b *batchConn) take() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.buf
	b.buf, b.spare = b.spare[:0], nil
	return p
}

// give returns a written buffer for reuse.
func (b *batchConn) give(p []byte) {
	if cap(p) > 2*batchLimit { // append may have grown it past the limit
		return
	}
	b.mu.Lock()
	if b.spare == nil {
		b.spare = p[:0]
	}
	b.mu.Unlock()
}

func (b *batchConn) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

func (b *batchConn) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	b.Close()
}

func (b *batchConn) flusher() {
	for {
		select {
		case <-b.kick:
		case <-b.done:
			return
		}
		// yamux's send loop writes a frame's header and body back to back,
		// and the goroutine it wakes often queues the next frame at once:
		// let them run before writing.
		for range batchYields {
			n := b.held()
			runtime.Gosched()
			if b.held() == n {
				break
			}
		}
		b.flush()
	}
}

func (b *batchConn) flush() {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	p := b.take()
	if len(p) == 0 {
		return
	}
	_, err := b.Conn.Write(p)
	b.give(p)
	if err != nil {
		b.fail(err)
	}
}

// Close closes the conn and stops the flusher. Bytes not yet written are
// dropped, as the session's own queue is.
func (b *batchConn) Close() error {
	err := net.ErrClosed
	b.closeOnce.Do(func() {
		b.mu.Lock()
		if b.err == nil {
			b.err = net.ErrClosed
		}
		b.mu.Unlock()
		close(b.done)
		err = b.Conn.Close()
	})
	return err
}
