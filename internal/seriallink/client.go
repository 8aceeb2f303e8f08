package seriallink

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client starts the host's end of a link over c, the host side of the port
// (QEMU's chardev socket), and returns a connection to the guest's current
// Accept. It sends the preamble and hello at once; the guest ends whatever
// connection it had.
//
// The returned conn owns c: closing it closes c. On error Client closes c.
// Reads skip everything on c that is not a frame of this connection, such as
// what the guest wrote to a connection before it. Deadlines are c's; a
// Write cut short by one (or any error) may leave half a frame behind, so
// the connection should then be closed, as yamux does.
func Client(c net.Conn) (net.Conn, error) {
	var epoch uint32
	for epoch == 0 { // 0 is the guest's "no connection yet"
		var b [4]byte
		rand.Read(b[:])
		epoch = binary.BigEndian.Uint32(b[:])
	}
	// The zeros complete any frame the guest is in the middle of, however
	// long, and then cannot form a header: the guest is left scanning for
	// the hello.
	hello := make([]byte, headerLen+MaxPayload+headerLen)
	putHeader(hello[headerLen+MaxPayload:], epoch, 0)
	if _, err := c.Write(hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("seriallink: send hello: %w", err)
	}
	return &clientConn{
		c:     c,
		epoch: epoch,
		fr:    newFrameReader(c, epoch),
		fw:    newFrameWriter(c),
	}, nil
}

type clientConn struct {
	c     net.Conn
	epoch uint32
	fw    *frameWriter

	rmu     sync.Mutex // guards fr and pending
	fr      *frameReader
	pending []byte // rest of the current frame's payload, in fr's buffer
}

// Read returns payload of this connection's frames. Errors from the
// underlying conn come back as they are, so that io.EOF and timeouts keep
// their meaning.
func (cc *clientConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	cc.rmu.Lock()
	defer cc.rmu.Unlock()
	for len(cc.pending) == 0 {
		_, payload, err := cc.fr.next()
		if err != nil {
			return 0, err
		}
		cc.pending = payload
	}
	n := copy(p, cc.pending)
	cc.pending = cc.pending[n:]
	return n, nil
}

func (cc *clientConn) Write(p []byte) (int, error) {
	return cc.fw.write(cc.epoch, p, nil)
}

func (cc *clientConn) Close() error                       { return cc.c.Close() }
func (cc *clientConn) LocalAddr() net.Addr                { return cc.c.LocalAddr() }
func (cc *clientConn) RemoteAddr() net.Addr               { return cc.c.RemoteAddr() }
func (cc *clientConn) SetDeadline(t time.Time) error      { return cc.c.SetDeadline(t) }
func (cc *clientConn) SetReadDeadline(t time.Time) error  { return cc.c.SetReadDeadline(t) }
func (cc *clientConn) SetWriteDeadline(t time.Time) error { return cc.c.SetWriteDeadline(t) }
