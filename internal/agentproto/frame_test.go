package agentproto

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// TestReadPayload reads payloads across readPayload's growth steps, and
// payloads cut short at the start, mid-step and past a step.
func TestReadPayload(t *testing.T) {
	big := bytes.Repeat([]byte("ab"), payloadStep+7) // over two steps
	tests := []struct {
		name    string
		n       int
		sent    []byte
		wantErr error
	}{
		{"empty", 0, nil, nil},
		{"small", 3, []byte("abc"), nil},
		{"over two steps", len(big), big, nil},
		{"nothing sent", 10, nil, io.EOF},
		{"cut mid-step", 10, []byte("abc"), io.ErrUnexpectedEOF},
		{"cut past a step", len(big), big[:payloadStep+1], io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readPayload(bytes.NewReader(tc.sent), uint32(tc.n))
			if !errors.Is(err, tc.wantErr) || (err == nil && tc.wantErr != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && !bytes.Equal(got, tc.sent[:tc.n]) {
				t.Fatalf("read %d bytes, not the %d sent", len(got), tc.n)
			}
		})
	}
}

// oneByteReader gives its content a byte per Read, then err.
type oneByteReader struct {
	b   []byte
	err error
}

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	p[0], r.b = r.b[0], r.b[1:]
	return 1, nil
}

// frameSizes counts the Data frames on b and their payload sizes.
func frameSizes(t *testing.T, b []byte) (sizes []int, ended bool) {
	t.Helper()
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		typ, n, err := readFrameHeader(r)
		if err != nil {
			t.Fatal(err)
		}
		if typ == frameEnd {
			return sizes, true
		}
		sizes = append(sizes, int(n))
		r.Seek(int64(n), io.SeekCurrent)
	}
	return sizes, false
}

// TestReadFull: bulk content goes in full frames however the reader hands
// it over, and a reader cut short (io.ErrUnexpectedEOF) is never taken for
// its end: io.ReadFull would have.
func TestReadFull(t *testing.T) {
	content := bytes.Repeat([]byte("z"), 2*ChunkSize+3)
	tests := []struct {
		name      string
		err       error
		wantErr   error
		wantSizes []int
	}{
		{"whole", io.EOF, nil, []int{ChunkSize, ChunkSize, 3}},
		{"cut short", io.ErrUnexpectedEOF, io.ErrUnexpectedEOF, []int{ChunkSize, ChunkSize, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			dw := &dataWriter{w: &out}
			n, err := dw.readFull(&oneByteReader{b: content, err: tc.err})
			if err != tc.wantErr {
				t.Fatalf("readFull: %v, want %v", err, tc.wantErr)
			}
			if n != int64(len(content)) {
				t.Fatalf("framed %d bytes, want %d", n, len(content))
			}
			sizes, _ := frameSizes(t, out.Bytes())
			if !slices.Equal(sizes, tc.wantSizes) {
				t.Fatalf("frames %v, want %v", sizes, tc.wantSizes)
			}
		})
	}
}

// countWriter counts the writes it is given.
type countWriter struct {
	bytes.Buffer
	n int
}

func (w *countWriter) Write(p []byte) (int, error) { w.n++; return w.Buffer.Write(p) }

// TestFrameOneWrite: each frame, header and payload, is one write; over
// yamux a write is a frame of its own, and a lone header a segment.
func TestFrameOneWrite(t *testing.T) {
	var w countWriter
	dw := NewDataWriter(&w)
	dw.Write([]byte("abc"))
	dw.(io.ReaderFrom).ReadFrom(bytes.NewReader([]byte("def")))
	dw.Close()
	WriteJSON(&w, map[string]int{"a": 1})
	if w.n != 4 {
		t.Fatalf("%d writes for 4 frames", w.n)
	}
	r := NewDataReader(&w)
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "abcdef" {
		t.Fatalf("read back %q, %v", got, err)
	}
	var v map[string]int
	if err := ReadJSON(&w, &v); err != nil || v["a"] != 1 {
		t.Fatalf("JSON frame read back %v, %v", v, err)
	}
}
