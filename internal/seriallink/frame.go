// Package seriallink carries one net.Conn at a time over a virtio-serial
// port, the agent's link to the host in a QEMU sandbox.
//
// A virtio-serial port is one raw byte stream: nothing in it marks where one
// host connection ends and the next begins. The host may disconnect and
// connect again at any time (a daemon restart), and a snapshot of a VM may be
// restored into many clones, each of whose guests still holds the old
// session's state, perhaps half a frame in its read buffer, while its host
// connects fresh. The guest's own view of host connects and disconnects (a
// read returning 0 while the host is away) is racy: it may miss a
// reconnection entirely, or report a hang-up after the next connection's
// first bytes. So the link resynchronises in-band, and a guest connection
// ends only when a new one begins.
//
// Everything on the port travels in frames: a 16-byte header (the magic
// "CVL1", an epoch, the payload length, a CRC-32 of those 12 bytes) and at
// most MaxPayload bytes of payload. Each host connection picks a random
// epoch and opens with a preamble of zeros long enough to complete any frame
// a guest is stuck in, then a hello frame. A guest that sees a new epoch ends
// its current connection and accepts a new one. A host takes only frames
// of its own epoch: what the guest wrote to an earlier host, possibly ending
// in half a frame, is skipped. Bytes that do not form a valid header are
// skipped one at a time until one does.
//
// Client is the host's end and Listen the guest's. They carry whatever runs
// on top (agentproto's yamux sessions) unchanged.
package seriallink

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"
)

const (
	// MaxPayload is the most payload one frame carries.
	MaxPayload = 32 << 10

	headerLen = 16
	magic     = "CVL1"
)

// putHeader writes the header of a frame of n payload bytes into h.
func putHeader(h []byte, epoch uint32, n int) {
	copy(h, magic)
	binary.BigEndian.PutUint32(h[4:], epoch)
	binary.BigEndian.PutUint32(h[8:], uint32(n))
	binary.BigEndian.PutUint32(h[12:], crc32.ChecksumIEEE(h[:12]))
}

// parseHeader reports whether h is a valid header and, if so, what it says.
// A length above MaxPayload makes it invalid: it is noise, and must not make
// the reader wait for (or allocate) gigabytes.
func parseHeader(h []byte) (epoch uint32, n int, ok bool) {
	if string(h[:4]) != magic || binary.BigEndian.Uint32(h[12:]) != crc32.ChecksumIEEE(h[:12]) {
		return 0, 0, false
	}
	length := binary.BigEndian.Uint32(h[8:])
	if length > MaxPayload {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(h[4:]), int(length), true
}

// A frameReader finds frames in a stream that may start, or carry on,
// anywhere: in the middle of a frame, in garbage, in the host's preamble.
type frameReader struct {
	r io.Reader
	// only, if not 0, is the one epoch whose frames are wanted. A header
	// of another epoch is then skipped like garbage, not with its payload:
	// what the guest wrote to an earlier host may end in half a frame, whose
	// length must not swallow the first frames of the current epoch.
	only uint32
	buf  []byte // fixed size: a frame never needs more
	off  int    // buf[off:end] is read but not yet consumed
	end  int
}

func newFrameReader(r io.Reader, only uint32) *frameReader {
	// Room for two frames, so that most reads fill more than one.
	return &frameReader{r: r, only: only, buf: make([]byte, 2*(headerLen+MaxPayload))}
}

// next returns the next valid frame (of epoch only, if set). The payload aliases the reader's
// buffer and stays valid until the next call. An error from the underlying
// reader is returned as it is; what was read before it is kept, so that
// after a timeout, say, next carries on where it left off.
func (fr *frameReader) next() (epoch uint32, payload []byte, err error) {
	for {
		if err := fr.fill(headerLen); err != nil {
			return 0, nil, err
		}
		epoch, n, ok := parseHeader(fr.buf[fr.off : fr.off+headerLen])
		if !ok || fr.only != 0 && epoch != fr.only {
			fr.resync()
			continue
		}
		if err := fr.fill(headerLen + n); err != nil {
			return 0, nil, err
		}
		payload = fr.buf[fr.off+headerLen : fr.off+headerLen+n]
		fr.off += headerLen + n
		return epoch, payload, nil
	}
}

// resync drops the byte at which no wanted header starts, and every byte
// after it that cannot start one either: a header starts with the magic.
func (fr *frameReader) resync() {
	fr.off++
	if i := bytes.Index(fr.buf[fr.off:fr.end], []byte(magic)); i >= 0 {
		fr.off += i
		return
	}
	// Keep a tail that may be the start of a magic cut off by the read.
	fr.off = max(fr.off, fr.end-(len(magic)-1))
}

// fill reads until at least n unconsumed bytes are buffered.
func (fr *frameReader) fill(n int) error {
	if fr.off+n > len(fr.buf) {
		fr.end = copy(fr.buf, fr.buf[fr.off:fr.end])
		fr.off = 0
	}
	for fr.end-fr.off < n {
		m, err := fr.r.Read(fr.buf[fr.end:])
		fr.end += m
		if err != nil {
			if fr.end-fr.off >= n {
				return nil // the error comes back on the next read
			}
			return err
		}
	}
	return nil
}

// A frameWriter writes frames to a stream shared by every writer on one
// side of the link.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte // header and payload, so that a frame is one Write
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: w, buf: make([]byte, headerLen+MaxPayload)}
}

// write sends p in frames of the given epoch. It holds the stream for the
// whole of p, so that concurrent writes neither interleave their frames nor
// their bytes. Before each frame it calls check, if not nil, and stops with
// its error: a connection ended while it writes must not go on sending.
func (fw *frameWriter) write(epoch uint32, p []byte, check func() error) (n int, err error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for len(p) > 0 {
		if check != nil {
			if err := check(); err != nil {
				return n, err
			}
		}
		chunk := min(len(p), MaxPayload)
		putHeader(fw.buf, epoch, chunk)
		copy(fw.buf[headerLen:], p[:chunk])
		if _, err := fw.w.Write(fw.buf[:headerLen+chunk]); err != nil {
			return n, err
		}
		n += chunk
		p = p[chunk:]
	}
	return n, nil
}
