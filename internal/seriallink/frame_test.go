package seriallink

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
)

// frame encodes one frame.
func frame(epoch uint32, payload []byte) []byte {
	b := make([]byte, headerLen+len(payload))
	putHeader(b, epoch, len(payload))
	copy(b[headerLen:], payload)
	return b
}

// rawHeader is a header with a correct CRC over whatever length it says.
func rawHeader(epoch, length uint32) []byte {
	h := make([]byte, headerLen)
	copy(h, magic)
	binary.BigEndian.PutUint32(h[4:], epoch)
	binary.BigEndian.PutUint32(h[8:], length)
	binary.BigEndian.PutUint32(h[12:], crc32.ChecksumIEEE(h[:12]))
	return h
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

type gotFrame struct {
	epoch   uint32
	payload []byte
}

// readFrames returns every frame in r, with payloads copied, until an
// error, which must be io.EOF.
func readFrames(t *testing.T, r io.Reader, only uint32) []gotFrame {
	t.Helper()
	fr := newFrameReader(r, only)
	var got []gotFrame
	for {
		epoch, payload, err := fr.next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		got = append(got, gotFrame{epoch, bytes.Clone(payload)})
	}
}

func TestFrameReader(t *testing.T) {
	big := randBytes(MaxPayload)
	half := randBytes(1000)
	preamble := make([]byte, headerLen+MaxPayload)
	badCRC := frame(7, []byte("x"))
	badCRC[13] ^= 1
	badMagic := frame(7, []byte("x"))
	badMagic[0] = 'D'

	tests := []struct {
		name string
		in   [][]byte
		only uint32
		want []gotFrame
	}{
		{
			name: "frames",
			in:   [][]byte{frame(1, []byte("abc")), frame(1, nil), frame(2, big)},
			want: []gotFrame{{1, []byte("abc")}, {1, nil}, {2, big}},
		},
		{
			name: "garbage around",
			in:   [][]byte{[]byte("CVxCVL"), frame(1, []byte("a")), []byte("CVL1CVL1junk"), frame(1, []byte("b")), []byte("CV")},
			want: []gotFrame{{1, []byte("a")}, {1, []byte("b")}},
		},
		{
			name: "preamble and hello",
			in:   [][]byte{preamble, frame(9, nil)},
			want: []gotFrame{{9, nil}},
		},
		{
			// A restored guest: the zeros complete its half frame, which it
			// passes to the old connection, and then it finds the hello.
			name: "half frame then preamble",
			in:   [][]byte{frame(1, half)[:500], preamble, frame(9, nil), frame(9, []byte("new"))},
			want: []gotFrame{
				{1, append(bytes.Clone(half[:500-headerLen]), make([]byte, 1000-(500-headerLen))...)},
				{9, nil}, {9, []byte("new")},
			},
		},
		{
			name: "half frame of maximum size then preamble",
			in:   [][]byte{frame(1, big)[:headerLen+1], preamble, frame(9, nil)},
			want: []gotFrame{{1, append(big[:1:1], make([]byte, MaxPayload-1)...)}, {9, nil}},
		},
		{
			name: "half header then preamble",
			in:   [][]byte{frame(1, half)[:7], preamble, frame(9, []byte("x"))},
			want: []gotFrame{{9, []byte("x")}},
		},
		{
			name: "bad crc",
			in:   [][]byte{badCRC, frame(2, []byte("y"))},
			want: []gotFrame{{2, []byte("y")}},
		},
		{
			name: "bad magic",
			in:   [][]byte{badMagic, frame(2, []byte("y"))},
			want: []gotFrame{{2, []byte("y")}},
		},
		{
			name: "oversize length",
			in:   [][]byte{rawHeader(1, MaxPayload+1), frame(3, []byte("z")), rawHeader(1, 0xffffffff), frame(3, []byte("w"))},
			want: []gotFrame{{3, []byte("z")}, {3, []byte("w")}},
		},
		{
			name: "one epoch: others skipped",
			in:   [][]byte{frame(1, []byte("stale")), frame(5, []byte("mine")), frame(2, big), frame(5, []byte("again"))},
			only: 5,
			want: []gotFrame{{5, []byte("mine")}, {5, []byte("again")}},
		},
		{
			// The guest's output to an earlier host ended in half a frame:
			// its length must not swallow the current epoch's frames.
			name: "one epoch: half a stale frame",
			in:   [][]byte{frame(1, big)[:headerLen+100], frame(5, []byte("mine")), frame(1, half)[:headerLen], frame(5, []byte("more"))},
			only: 5,
			want: []gotFrame{{5, []byte("mine")}, {5, []byte("more")}},
		},
		{
			name: "truncated at the end",
			in:   [][]byte{frame(1, []byte("a")), frame(1, half)[:300]},
			want: []gotFrame{{1, []byte("a")}},
		},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
	}
	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				in := bytes.NewReader(slices.Concat(tt.in...))
				got := readFrames(t, rd.wrap(in), tt.only)
				if len(got) != len(tt.want) {
					t.Fatalf("got %d frames, want %d", len(got), len(tt.want))
				}
				for i := range got {
					if got[i].epoch != tt.want[i].epoch || !bytes.Equal(got[i].payload, tt.want[i].payload) {
						t.Errorf("frame %d: epoch %d, %d bytes; want epoch %d, %d bytes",
							i, got[i].epoch, len(got[i].payload), tt.want[i].epoch, len(tt.want[i].payload))
					}
				}
			})
		}
	}
}

// loopReader repeats b forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// A huge length field must not make the reader allocate.
func TestFrameReaderNoAllocs(t *testing.T) {
	in := slices.Concat(rawHeader(1, 0xffffffff), []byte("noise"), frame(1, []byte("ok")), rawHeader(2, 1<<30))
	fr := newFrameReader(&loopReader{b: in}, 0)
	allocs := testing.AllocsPerRun(100, func() {
		epoch, payload, err := fr.next()
		if err != nil || epoch != 1 || string(payload) != "ok" {
			t.Fatalf("next = %d, %q, %v", epoch, payload, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame", allocs)
	}
}

// frameChecker is a stream that checks each Write is exactly one frame.
type frameChecker struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *frameChecker) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) < headerLen {
		w.t.Errorf("write of %d bytes: shorter than a header", len(p))
	} else if _, n, ok := parseHeader(p); !ok || headerLen+n != len(p) {
		w.t.Errorf("write of %d bytes is not one frame (header ok %v, length %d)", len(p), ok, n)
	}
	return w.buf.Write(p)
}

func TestFrameWriter(t *testing.T) {
	// Concurrent writers, each its own epoch: each one's bytes must come out
	// whole and in order, and no frame may be torn.
	w := &frameChecker{t: t}
	fw := newFrameWriter(w)
	const writers = 8
	data := make([][]byte, writers)
	var wg sync.WaitGroup
	for i := range writers {
		data[i] = randBytes(3*MaxPayload + 1000*i)
		wg.Go(func() {
			for p := data[i]; len(p) > 0; {
				n := min(len(p), 5000+7919*i)
				if m, err := fw.write(uint32(i+1), p[:n], nil); m != n || err != nil {
					t.Errorf("write = %d, %v", m, err)
				}
				p = p[n:]
			}
		})
	}
	wg.Wait()
	got := make([][]byte, writers)
	for _, f := range readFrames(t, &w.buf, 0) {
		if len(f.payload) == 0 || len(f.payload) > MaxPayload {
			t.Errorf("frame of %d bytes", len(f.payload))
		}
		got[f.epoch-1] = append(got[f.epoch-1], f.payload...)
	}
	for i := range writers {
		if !bytes.Equal(got[i], data[i]) {
			t.Errorf("writer %d: got %d bytes, want %d, or they differ", i, len(got[i]), len(data[i]))
		}
	}
}

func TestFrameWriterCheck(t *testing.T) {
	var buf bytes.Buffer
	fw := newFrameWriter(&buf)
	calls := 0
	stop := errors.New("stop")
	n, err := fw.write(1, randBytes(3*MaxPayload), func() error {
		if calls++; calls == 3 {
			return stop
		}
		return nil
	})
	if n != 2*MaxPayload || err != stop {
		t.Errorf("write = %d, %v; want %d, %v", n, err, 2*MaxPayload, stop)
	}
}
