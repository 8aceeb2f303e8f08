package bench

import (
	"bytes"
	"crypto/sha256"
	"io"
	"testing"
)

func TestTestData(t *testing.T) {
	const size = 3*blockSize + 12345
	a, err := io.ReadAll(newTestData(1, size))
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != size {
		t.Fatalf("len = %d, want %d", len(a), size)
	}
	// Reading in odd pieces gives the same bytes.
	var b bytes.Buffer
	d := newTestData(1, size)
	buf := make([]byte, 5)
	for {
		n, err := d.Read(buf)
		b.Write(buf[:n])
		if err == io.EOF {
			break
		}
		buf = make([]byte, len(buf)*3+1)
	}
	if !bytes.Equal(a, b.Bytes()) {
		t.Error("data depends on read sizes")
	}
	if bytes.Equal(a[:blockSize], a[blockSize:2*blockSize]) {
		t.Error("consecutive MiB are equal")
	}
	c, _ := io.ReadAll(newTestData(2, size))
	if bytes.Equal(a, c) {
		t.Error("seed makes no difference")
	}
}

func TestAsyncHasher(t *testing.T) {
	data, _ := io.ReadAll(newTestData(3, 5*blockSize+7))
	want := sha256.Sum256(data)
	h := newAsyncHasher(sha256.New())
	// Odd-sized writes, including ones bigger than a buffer.
	for _, piece := range [][]byte{data[:1], data[1 : 2*blockSize+3], data[2*blockSize+3:]} {
		if n, err := h.Write(piece); n != len(piece) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got := h.Sum(); !bytes.Equal(got, want[:]) {
		t.Errorf("sum %x, want %x", got, want)
	}
}
