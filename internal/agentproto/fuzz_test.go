package agentproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"path"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// frame builds one raw frame for a seed.
func frame(typ byte, payload []byte) []byte {
	b := make([]byte, frameHeaderLen, frameHeaderLen+len(payload))
	putFrameHeader(b, typ, len(payload))
	return append(b, payload...)
}

// lyingFrame is a header that claims n bytes followed by fewer.
func lyingFrame(typ byte, n uint32, sent string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], n)
	return append(b, sent...)
}

func addFrameSeeds(f *testing.F) {
	f.Add(frame(frameJSON, []byte(`{"op":"exec","args":["ls"]}`)))
	f.Add(frame(frameJSON, []byte(`{"shell":"echo hi","env":["A=b"],"stdin":"aGk=","timeout_ms":5}`)))
	f.Add(append(frame(frameChunk, []byte("\x01out")), frame(frameEnd, nil)...))
	f.Add(append(frame(frameData, []byte("content")), frame(frameEnd, nil)...))
	f.Add(lyingFrame(frameJSON, maxJSONFrame, "{}"))
	f.Add(lyingFrame(frameJSON, maxJSONFrame+1, ""))
	f.Add(lyingFrame(frameData, ChunkSize+2, "x"))
	f.Add(frame(frameChunk, nil))
	f.Add([]byte{9, 0, 0, 0, 0})
}

// allocated runs fn and reports the bytes it allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocBound is what reading in may allocate: the buffer grows with what
// arrived, so a header's claim alone costs little.
func allocBound(in []byte) uint64 { return 4*uint64(len(in)) + 2*payloadStep + 64<<10 }

// FuzzReadJSON feeds arbitrary bytes to ReadJSON: it must not panic,
// allocate beyond what arrived, or accept a frame over the limit; and what
// it decodes into an ExecRequest survives another trip through
// WriteJSON/ReadJSON unchanged and validates the same way.
func FuzzReadJSON(f *testing.F) {
	addFrameSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var req ExecRequest
		var err error
		if got := allocated(func() { err = ReadJSON(bytes.NewReader(in), &req) }); got > allocBound(in) {
			t.Fatalf("ReadJSON of %d bytes allocated %d", len(in), got)
		}
		if len(in) >= frameHeaderLen && binary.BigEndian.Uint32(in[1:5]) > maxJSONFrame && in[0] == frameJSON && !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("frame over the limit: err %v, want ErrFrameTooLarge", err)
		}
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteJSON(&buf, &req); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var again ExecRequest
		if err := ReadJSON(&buf, &again); err != nil {
			t.Fatalf("decode of the re-encoding: %v", err)
		}
		if !reflect.DeepEqual(normExec(req), normExec(again)) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
		if e1, e2 := req.Validate(), again.Validate(); (e1 == nil) != (e2 == nil) {
			t.Fatalf("validation differs after a round trip: %v / %v", e1, e2)
		}
	})
}

// normExec treats empty and nil slices alike: omitempty drops both.
func normExec(r ExecRequest) ExecRequest {
	if len(r.Args) == 0 {
		r.Args = nil
	}
	if len(r.Env) == 0 {
		r.Env = nil
	}
	if len(r.Stdin) == 0 {
		r.Stdin = nil
	}
	return r
}

// FuzzReadRecord reads records from arbitrary bytes until an error: no
// panic, no allocation beyond what arrived, no Chunk or Data record over
// its limit, and a record re-encoded reads back the same.
func FuzzReadRecord(f *testing.F) {
	addFrameSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var recs []Record
		got := allocated(func() {
			for range 64 {
				rec, err := ReadRecord(r)
				if err != nil || rec.Kind == RecordEnd {
					break
				}
				recs = append(recs, rec)
			}
		})
		if got > allocBound(in)+uint64(len(recs))*256 {
			t.Fatalf("reading %d bytes allocated %d", len(in), got)
		}
		for _, rec := range recs {
			if rec.Kind != RecordJSON && len(rec.Data) > ChunkSize {
				t.Fatalf("record of kind %d carries %d bytes, over %d", rec.Kind, len(rec.Data), ChunkSize)
			}
			var buf bytes.Buffer
			switch {
			case rec.Kind == RecordChunk && len(rec.Data) == 0:
				continue // WriteChunk writes nothing for no output
			case rec.Kind == RecordChunk:
				if err := WriteChunk(&buf, rec.Stream, rec.Data); err != nil {
					t.Fatal(err)
				}
			default:
				if err := writeFrame(&buf, rec.Kind, rec.Data); err != nil {
					t.Fatal(err)
				}
			}
			back, err := ReadRecord(&buf)
			if err != nil || back.Kind != rec.Kind || back.Stream != rec.Stream || !bytes.Equal(back.Data, rec.Data) {
				t.Fatalf("record %+v read back as %+v (%v)", rec, back, err)
			}
		}
	})
}

// FuzzDataReader: content framed by the data writer reads back the same,
// and arbitrary bytes read as content end in an error or EOF, never a
// panic or more bytes than the frames carried.
func FuzzDataReader(f *testing.F) {
	addFrameSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var buf bytes.Buffer
		w := NewDataWriter(&buf)
		if _, err := w.Write(in); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(NewDataReader(&buf))
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("content round trip: %d bytes in, %d out, err %v", len(in), len(out), err)
		}
		out, _ = io.ReadAll(NewDataReader(bytes.NewReader(in)))
		if len(out) > len(in) {
			t.Fatalf("read %d bytes of content from %d bytes of frames", len(out), len(in))
		}
	})
}

// FuzzResolvePath: a path ResolvePath accepts is absolute, clean, free of
// ".." and NUL, stays under WorkDir when given relative, and resolves to
// itself again.
func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"a.txt", "/etc/passwd", "../x", "a/../../b", "./.", "//x//y/", "a\x00b", "", "...", "/..", ".../..a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := ResolvePath(p)
		if err != nil {
			return
		}
		switch {
		case !path.IsAbs(got) || path.Clean(got) != got:
			t.Fatalf("ResolvePath(%q) = %q: not absolute and clean", p, got)
		case strings.ContainsRune(got, 0):
			t.Fatalf("ResolvePath(%q) = %q holds a NUL", p, got)
		case !path.IsAbs(p) && got != WorkDir && !strings.HasPrefix(got, WorkDir+"/"):
			t.Fatalf("relative %q resolved to %q, outside %s", p, got, WorkDir)
		}
		for _, el := range strings.Split(got, "/") {
			if el == ".." {
				t.Fatalf("ResolvePath(%q) = %q has '..'", p, got)
			}
		}
		if again, err := ResolvePath(got); err != nil || again != got {
			t.Fatalf("ResolvePath(%q) = %q, then %q, %v", p, got, again, err)
		}
	})
}
