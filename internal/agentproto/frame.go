package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Frame types.
const (
	frameJSON byte = 1 // a Header or a Response
	frameData byte = 2 // a chunk of file content
	frameEnd  byte = 3 // end of file content
)

// maxJSONFrame bounds a JSON frame so a confused peer cannot make us allocate
// without limit. Exec stdin and output travel in JSON, so it is generous: it
// holds the largest valid exec request (stdin in base64, every byte of the
// command line escaped as \u00XX) and the largest answer (each output
// stream within twice MaxOutput once escaped: see the agent's jsonFit).
const maxJSONFrame = max((MaxStdin+2)/3*4+6*(MaxArgs+MaxCwd), 4*MaxOutput) + 1<<20

// ErrFrameTooLarge reports a JSON frame over the limit both ends share:
// WriteJSON refuses to send one, and ReadJSON to read one.
var ErrFrameTooLarge = errors.New("agentproto: JSON frame too large")

// frameTooLarge is ErrFrameTooLarge from ReadJSON, with the frame's size so
// that the reader may skip it.
type frameTooLarge struct{ size uint32 }

func (e *frameTooLarge) Error() string {
	return fmt.Sprintf("agentproto: JSON frame of %d bytes is over the limit of %d", e.size, maxJSONFrame)
}

func (e *frameTooLarge) Unwrap() error { return ErrFrameTooLarge }

// ChunkSize is the payload size of the Data frames a writer emits.
const ChunkSize = 256 << 10

// frameHeaderLen is the size of a frame's header: its type and length.
const frameHeaderLen = 5

// putFrameHeader writes the header of a frame of n payload bytes to b.
func putFrameHeader(b []byte, typ byte, n int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:frameHeaderLen], uint32(n))
}

// writeFrame writes a frame in one write: over yamux every write is a
// frame of its own, and a frame's header alone costs a segment.
func writeFrame(w io.Writer, typ byte, payload []byte) error {
	b := make([]byte, frameHeaderLen+len(payload))
	putFrameHeader(b, typ, len(payload))
	copy(b[frameHeaderLen:], payload)
	_, err := w.Write(b)
	return err
}

func readFrameHeader(r io.Reader) (typ byte, n uint32, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	return hdr[0], binary.BigEndian.Uint32(hdr[1:]), nil
}

// WriteJSON writes v as one JSON frame, or nothing and ErrFrameTooLarge if
// it is over the limit.
func WriteJSON(w io.Writer, v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return err
	}
	return writeFrame(w, frameJSON, b)
}

// writeJSONFrame writes a JSON frame whose payload is already encoded.
func writeJSONFrame(w io.Writer, payload []byte) error {
	if len(payload) > maxJSONFrame {
		return fmt.Errorf("%w: %d bytes, over the limit of %d", ErrFrameTooLarge, len(payload), maxJSONFrame)
	}
	return writeFrame(w, frameJSON, payload)
}

// encodeJSON encodes a JSON frame's payload, refusing one over the limit.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) > maxJSONFrame {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrFrameTooLarge, len(b), maxJSONFrame)
	}
	return b, nil
}

// ReadJSON reads one JSON frame into v.
func ReadJSON(r io.Reader, v any) error {
	typ, n, err := readFrameHeader(r)
	if err != nil {
		return err
	}
	if typ != frameJSON {
		return fmt.Errorf("agentproto: want JSON frame, got type %d", typ)
	}
	if n > maxJSONFrame {
		return &frameTooLarge{size: n}
	}
	b, err := readPayload(r, n)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// payloadStep is how much of a payload readPayload allocates ahead of the
// bytes that have arrived.
const payloadStep = 1 << 20

// readPayload reads a frame's payload of n bytes. The buffer grows with
// what arrives rather than to the size the header claims: a peer that
// announces a frame at the limit and sends five bytes costs five bytes,
// not the limit.
func readPayload(r io.Reader, n uint32) ([]byte, error) {
	size := int(n)
	b := make([]byte, 0, min(size, payloadStep))
	for len(b) < size {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(size-len(b), len(b)))
		}
		m, err := io.ReadFull(r, b[len(b):min(cap(b), size)])
		b = b[:len(b)+m]
		if errors.Is(err, io.EOF) && len(b) > 0 {
			// Cut short in a later step: still mid-payload.
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// dataWriter turns writes into Data frames. Close writes the End frame.
// Each frame is built in buf, header and payload, and written at once.
type dataWriter struct {
	w   io.Writer
	buf []byte
}

// NewDataWriter returns a writer that frames what it is given as Data frames
// on w; Close marks the end of the content.
func NewDataWriter(w io.Writer) io.WriteCloser { return &dataWriter{w: w} }

// frame returns the buffer a frame of up to n payload bytes is built in.
func (d *dataWriter) frame(n int) []byte {
	if cap(d.buf) < frameHeaderLen+n {
		d.buf = make([]byte, frameHeaderLen+n)
	}
	return d.buf[:frameHeaderLen+n]
}

func (d *dataWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), ChunkSize)
		f := d.frame(n)
		putFrameHeader(f, frameData, n)
		copy(f[frameHeaderLen:], p[:n])
		if _, err := d.w.Write(f); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// ReadFrom frames what each Read gives, read straight into the frame.
func (d *dataWriter) ReadFrom(r io.Reader) (int64, error) {
	return d.readFrom(r, func(b []byte) (int, error) { return r.Read(b) })
}

// readFull frames r's content in full frames, the last one excepted: for
// bulk content, where fewer and larger frames cost less than prompt ones.
func (d *dataWriter) readFull(r io.Reader) (int64, error) {
	return d.readFrom(r, func(b []byte) (int, error) { return Fill(r, b) })
}

// Fill reads into b until it is full or r fails. Unlike io.ReadFull, it
// reports r's own io.EOF as io.EOF and every other error as itself, so a
// reader cut short (io.ErrUnexpectedEOF from r) is never taken for the end.
func Fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (d *dataWriter) readFrom(r io.Reader, read func([]byte) (int, error)) (int64, error) {
	f := d.frame(ChunkSize)
	var total int64
	for {
		n, err := read(f[frameHeaderLen:])
		if n > 0 {
			putFrameHeader(f, frameData, n)
			if _, werr := d.w.Write(f[:frameHeaderLen+n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (d *dataWriter) Close() error { return writeFrame(d.w, frameEnd, nil) }

// dataReader reads Data frames until the End frame, then reports io.EOF.
type dataReader struct {
	r      io.Reader
	remain uint32 // bytes left in the current Data frame
	done   bool
}

// NewDataReader returns a reader of the content carried as Data frames on r.
// It returns io.EOF after the End frame and io.ErrUnexpectedEOF when the
// stream ends before it.
func NewDataReader(r io.Reader) io.Reader { return &dataReader{r: r} }

func (d *dataReader) Read(p []byte) (int, error) {
	for d.remain == 0 {
		if d.done {
			return 0, io.EOF
		}
		typ, n, err := readFrameHeader(d.r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		switch typ {
		case frameData:
			d.remain = n
		case frameEnd:
			d.done = true
		default:
			return 0, fmt.Errorf("agentproto: unexpected frame type %d in content", typ)
		}
	}
	if uint32(len(p)) > d.remain {
		p = p[:d.remain]
	}
	n, err := d.r.Read(p)
	d.remain -= uint32(n)
	if errors.Is(err, io.EOF) && d.remain > 0 {
		err = io.ErrUnexpectedEOF
	} else if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
