package agentproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/yamux"
)

// Streaming calls (a streamed exec, a process's output, a terminal, a
// watch) answer with a Response frame and then a sequence of records:
// Chunk frames of output, JSON frames of events, and an End frame.

// frameChunk carries output of one of a process's streams: its payload is
// the stream's id (Stdout, Stderr) and then the bytes.
const frameChunk byte = 4

// Ids of a process's output streams, as Chunk frames carry them. A
// terminal's output is Stdout.
const (
	Stdout byte = 1
	Stderr byte = 2
)

// StreamName is "stdout" or "stderr", the name the API gives stream id.
func StreamName(id byte) string {
	if id == Stderr {
		return "stderr"
	}
	return "stdout"
}

// WriteChunk writes p as output of stream, in frames of at most ChunkSize
// bytes. An empty p writes nothing. Each frame is one Write: over a
// virtio-serial link every write is a round trip to the host.
func WriteChunk(w io.Writer, stream byte, p []byte) error {
	const pre = frameHeaderLen + 1 // and the stream's id
	buf := make([]byte, pre+min(len(p), ChunkSize))
	for len(p) > 0 {
		n := min(len(p), ChunkSize)
		putFrameHeader(buf, frameChunk, 1+n)
		buf[frameHeaderLen] = stream
		copy(buf[pre:], p[:n])
		if _, err := w.Write(buf[:pre+n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// WriteEnd writes the End frame that closes a sequence of records.
func WriteEnd(w io.Writer) error { return writeFrame(w, frameEnd, nil) }

// Kinds of Record.
const (
	RecordChunk = frameChunk
	RecordJSON  = frameJSON
	RecordData  = frameData
	RecordEnd   = frameEnd
)

// Record is one frame of a streaming call after its Response.
type Record struct {
	Kind   byte   // RecordChunk, RecordJSON, RecordData or RecordEnd
	Stream byte   // of a Chunk: Stdout or Stderr
	Data   []byte // a Chunk's or Data frame's bytes, a JSON frame's payload
}

// Decode decodes a JSON record into v.
func (r Record) Decode(v any) error {
	if r.Kind != RecordJSON {
		return fmt.Errorf("agentproto: want a JSON record, got kind %d", r.Kind)
	}
	return json.Unmarshal(r.Data, v)
}

// ReadRecord reads the next record. A stream that ends without its End
// frame reports io.ErrUnexpectedEOF.
func ReadRecord(r io.Reader) (Record, error) {
	typ, n, err := readFrameHeader(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Record{}, err
	}
	switch typ {
	case frameEnd:
		return Record{Kind: RecordEnd}, nil
	case frameJSON:
		if n > maxJSONFrame {
			return Record{}, &frameTooLarge{size: n}
		}
	case frameChunk, frameData:
		if n > ChunkSize+1 {
			return Record{}, fmt.Errorf("agentproto: frame of %d bytes is over the limit of %d", n, ChunkSize+1)
		}
	default:
		return Record{}, fmt.Errorf("agentproto: unexpected frame type %d", typ)
	}
	b, err := readPayload(r, n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Record{}, err
	}
	if typ != frameChunk {
		return Record{Kind: typ, Data: b}, nil
	}
	if n == 0 {
		return Record{}, errors.New("agentproto: empty chunk frame")
	}
	return Record{Kind: RecordChunk, Stream: b[0], Data: b[1:]}, nil
}

// Stream is the host's end of a streaming call whose Response said yes:
// it reads the agent's records and may send frames of its own (a
// terminal's keystrokes, a process's stdin). Close ends the call; the
// agent takes it as a cancel.
type Stream struct {
	cl *call
}

// OpenStream starts a streaming call and reads its Response into out (may
// be nil). An error answer closes the call and is returned.
func (c *Client) OpenStream(ctx context.Context, op string, req, out any) (*Stream, error) {
	cl, err := c.open(ctx, op, req, nil)
	if err != nil {
		return nil, err
	}
	if err := c.answer(ctx, cl, op, out); err != nil {
		cl.close()
		return nil, err
	}
	return &Stream{cl: cl}, nil
}

// Next reads the next record.
func (s *Stream) Next() (Record, error) { return ReadRecord(s.cl.st) }

// Writer is where the host's frames go: wrap it with NewDataWriter, or
// write JSON frames to it with WriteJSON. It is not safe for concurrent
// use.
func (s *Stream) Writer() io.Writer { return s.cl.st }

// Close ends the call.
func (s *Stream) Close() error { return s.cl.close() }

// StreamServer serves the streaming ops of one concern: it reports false
// for an op that is not its own, and otherwise answers on st (a Response,
// then records) before it returns. decode decodes the call's body.
type StreamServer func(ctx context.Context, st *yamux.Stream, op string, decode func(any) error) (handled bool)

// ReadHostFrames reads what the host sends after its header on a
// bidirectional stream: Data frames to data, JSON frames to ctrl (each
// call owning its payload). It returns at the End frame (nil), or when
// the host closes the stream (io.EOF) or breaks the protocol.
func ReadHostFrames(r io.Reader, data func([]byte) error, ctrl func([]byte) error) error {
	for {
		rec, err := ReadRecord(r)
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return io.EOF
		case err != nil:
			return err
		}
		switch rec.Kind {
		case RecordEnd:
			return nil
		case RecordData:
			err = data(rec.Data)
		case RecordJSON:
			err = ctrl(rec.Data)
		default:
			err = fmt.Errorf("agentproto: unexpected frame kind %d from the host", rec.Kind)
		}
		if err != nil {
			return err
		}
	}
}
