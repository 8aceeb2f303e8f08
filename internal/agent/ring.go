package agent

import (
	"context"
	"fmt"
	"os"
	"sync"
)

// maxSegments bounds a ring's index: output that switches between stdout
// and stderr more often than that within the ring's bytes drops its
// oldest part early, counted as lost like bytes the ring wrapped over.
const maxSegments = 1 << 16

// ring is a process's output: the last size bytes of its stdout and
// stderr together, in the order they were read, kept in a file (so that
// it counts against the sandbox's disk, not the agent's memory) and
// written around, with an index in memory of which ranges came from which
// stream. Offsets count every byte the process ever wrote.
type ring struct {
	f    *os.File
	size int64

	mu      sync.Mutex
	written int64     // bytes ever appended: the offset of the next one
	floor   int64     // the oldest retained offset the index allows
	segs    []segment // ascending start; segs[0] covers the oldest retained byte
	changed chan struct{}
	done    bool // the process ended and its output is in
}

// segment is where a run of one stream's output starts.
type segment struct {
	start  int64
	stream byte
}

// chunk is a run of one stream's output read from the ring.
type chunk struct {
	stream byte
	offset int64
	data   []byte
}

func newRing(path string, size int64) (*ring, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the output ring: %w", err)
	}
	return &ring{f: f, size: size, changed: make(chan struct{})}, nil
}

// oldest is the oldest offset the ring still holds.
func (r *ring) oldestLocked() int64 { return max(r.floor, r.written-r.size) }

// Write appends p as output of stream. It never fails: output that cannot
// be kept is dropped, which readers see as lost, rather than stall the
// process.
func (r *ring) append(stream byte, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p) == 0 {
		return
	}
	start := r.written
	if over := int64(len(p)) - r.size; over > 0 {
		p, start = p[over:], start+over
	}
	for q, off := p, start; len(q) > 0; {
		at := off % r.size
		n := min(int64(len(q)), r.size-at)
		if _, err := r.f.WriteAt(q[:n], at); err != nil {
			// Keep the offsets true; what is unreadable is lost.
			r.floor = off + int64(len(q))
			break
		}
		q, off = q[n:], off+n
	}
	if n := len(r.segs); n == 0 || r.segs[n-1].stream != stream {
		r.segs = append(r.segs, segment{start: start, stream: stream})
	}
	r.written = start + int64(len(p))
	r.trimLocked()
	close(r.changed)
	r.changed = make(chan struct{})
}

// trimLocked drops index segments wholly older than the ring holds, and the
// oldest ones past maxSegments.
func (r *ring) trimLocked() {
	if len(r.segs) > maxSegments {
		r.floor = max(r.floor, r.segs[len(r.segs)-maxSegments].start)
	}
	old, i := r.oldestLocked(), 0
	for i+1 < len(r.segs) && r.segs[i+1].start <= old {
		i++
	}
	if i > 0 {
		r.segs = append(r.segs[:0], r.segs[i:]...)
	}
}

// finish marks the output complete and wakes readers.
func (r *ring) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	close(r.changed)
	r.changed = make(chan struct{})
}

// state returns the offset of the next byte, whether the output is
// complete, and a channel closed at the next change.
func (r *ring) state() (written int64, done bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written, r.done, r.changed
}

// read returns up to limit bytes of output from offset on, as chunks of one
// stream each. An offset older than the ring holds starts at the oldest
// byte it does, and lost says how many bytes were skipped; one past the
// end starts at the end.
func (r *ring) read(offset int64, limit int) (chunks []chunk, start, lost int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.oldestLocked(); offset < old {
		offset, lost = old, old-offset
	}
	offset = min(offset, r.written)
	end := min(r.written, offset+int64(limit))
	for off := offset; off < end; {
		i := r.segmentLocked(off)
		segEnd := end
		if i+1 < len(r.segs) {
			segEnd = min(segEnd, r.segs[i+1].start)
		}
		data := make([]byte, segEnd-off)
		if err := r.readAtLocked(data, off); err != nil {
			return nil, offset, lost, err
		}
		chunks = append(chunks, chunk{stream: r.segs[i].stream, offset: off, data: data})
		off = segEnd
	}
	return chunks, offset, lost, nil
}

// segmentLocked returns the index of the segment holding offset.
func (r *ring) segmentLocked(offset int64) int {
	lo, hi := 0, len(r.segs)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if r.segs[mid].start <= offset {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (r *ring) readAtLocked(p []byte, offset int64) error {
	for len(p) > 0 {
		at := offset % r.size
		n := min(int64(len(p)), r.size-at)
		if _, err := r.f.ReadAt(p[:n], at); err != nil {
			return fmt.Errorf("read the output ring: %w", err)
		}
		p, offset = p[n:], offset+n
	}
	return nil
}

// waitChange blocks until the ring changes after changed was taken, or ctx ends.
func waitChange(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *ring) close() error { return r.f.Close() }
