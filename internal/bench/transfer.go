package bench

// The file transfer benchmark: upload and download rates of generated
// data, checked end to end by its sha256.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// benchTransfer uploads FileMiB MiB of generated data, downloads it and
// checks that its sha256 matches.
func (b *bencher) benchTransfer(ctx context.Context, sb apitype.SandboxInfo) (up, down result) {
	const path = "cove-bench.bin" // under /work
	size := int64(b.o.FileMiB) << 20
	seed := uint64(time.Now().UnixNano())

	// Hash before timing, so that the upload's rate is the transfer's.
	h := sha256.New()
	if _, err := copyBlocks(h, newTestData(seed, size)); err != nil {
		err = fmt.Errorf("generate test data: %w", err)
		return failedResult("upload", unitMBps, err), failedResult("download", unitMBps, err)
	}
	want := h.Sum(nil)
	b.logf("uploading %s (sha256 %s)", humanize.IBytes(uint64(size)), hex.EncodeToString(want)[:16])

	t0 := time.Now()
	fi, err := b.cl.PutFile(ctx, sb.ID, sb.Token, path, 0o644, newTestData(seed, size), size)
	d := time.Since(t0)
	if err == nil && fi.Size != size {
		err = fmt.Errorf("uploaded %d bytes, the sandbox has %d", size, fi.Size)
	}
	if err != nil {
		err = fmt.Errorf("upload: %w", err)
		return failedResult("upload", unitMBps, err), failedResult("download", unitMBps, err)
	}
	up = rateResult("upload", size, d)
	b.logf("upload: %.1f MB/s", up.P50)

	t0 = time.Now()
	n, got, err := b.fetch(ctx, sb, path)
	d = time.Since(t0)
	switch {
	case err != nil:
		return up, failedResult("download", unitMBps, fmt.Errorf("download: %w", err))
	case n != size:
		return up, failedResult("download", unitMBps, fmt.Errorf("downloaded %d bytes, uploaded %d", n, size))
	case !bytes.Equal(got, want):
		return up, failedResult("download", unitMBps, fmt.Errorf("downloaded sha256 %x, uploaded %x", got, want))
	}
	down = rateResult("download", size, d)
	b.logf("download: %.1f MB/s, sha256 matches", down.P50)
	return up, down
}

// fetch downloads path and returns its length and sha256.
func (b *bencher) fetch(ctx context.Context, sb apitype.SandboxInfo, path string) (int64, []byte, error) {
	body, _, err := b.cl.GetFile(ctx, sb.ID, sb.Token, path)
	if err != nil {
		return 0, nil, err
	}
	defer body.Close()
	h := newAsyncHasher(sha256.New())
	n, err := copyBlocks(h, body)
	sum := h.Sum()
	return n, sum, err
}

// copyBlocks copies in blocks of a MiB: fewer syscalls than io.Copy's
// 32 KiB. Hiding the other methods keeps io.CopyBuffer from bypassing it.
func copyBlocks(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, blockSize))
}

// testData streams size pseudo-random bytes without holding them: one
// random MiB, repeated, with each repetition's first 8 bytes replaced by
// its index so that no two MiB are alike. It costs a copy, so that the
// generator doesn't slow the upload it measures.
type testData struct {
	block []byte
	size  int64
	off   int64
}

const blockSize = 1 << 20

func newTestData(seed uint64, size int64) *testData {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	block := make([]byte, blockSize)
	rand.NewChaCha8(key).Read(block)
	return &testData{block: block, size: size}
}

func (d *testData) Read(p []byte) (int, error) {
	if d.off >= d.size {
		return 0, io.EOF
	}
	i := int(d.off % blockSize)
	n := copy(p, d.block[i:])
	if rest := d.size - d.off; int64(n) > rest {
		n = int(rest)
	}
	var stamp [8]byte
	binary.LittleEndian.PutUint64(stamp[:], uint64(d.off/blockSize))
	for j := i; j < 8 && j < i+n; j++ {
		p[j-i] = stamp[j]
	}
	d.off += int64(n)
	return n, nil
}

// asyncHasher hashes what is written to it on its own goroutine, so that
// hashing a download overlaps reading it rather than slowing it. Sum
// must be called, once, to stop the goroutine.
type asyncHasher struct {
	h    hash.Hash
	full chan []byte
	free chan []byte
	done chan struct{}
}

func newAsyncHasher(h hash.Hash) *asyncHasher {
	const bufs = 4
	a := &asyncHasher{
		h:    h,
		full: make(chan []byte, bufs),
		free: make(chan []byte, bufs),
		done: make(chan struct{}),
	}
	for range bufs {
		a.free <- make([]byte, blockSize)
	}
	go func() {
		defer close(a.done)
		for buf := range a.full {
			a.h.Write(buf)
			a.free <- buf[:cap(buf)]
		}
	}()
	return a
}

func (a *asyncHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		buf := <-a.free
		k := copy(buf, p)
		a.full <- buf[:k]
		p = p[k:]
	}
	return n, nil
}

// Sum waits for everything written to be hashed and returns the sum.
func (a *asyncHasher) Sum() []byte {
	close(a.full)
	<-a.done
	return a.h.Sum(nil)
}
