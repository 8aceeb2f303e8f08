package image

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
)

// countingReader counts the bytes read through it, for progress lines
// printed from another goroutine.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// withByteProgress runs fn, printing every heartbeat how many bytes of
// what label names c has seen, so that a long upload or layer shows it is
// moving.
func (b *builder) withByteProgress(label string, c *countingReader, fn func() error) error {
	return withHeartbeat(fn, func(elapsed time.Duration) {
		b.prog.printf("%s: %s so far (%ds)", label, humanize.IBytes(uint64(c.n.Load())), int(elapsed.Seconds()))
	})
}
