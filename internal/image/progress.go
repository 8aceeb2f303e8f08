package image

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// heartbeat is how often a long step reports that it is still alive.
const heartbeat = 10 * time.Second

// progress prints human-readable build stages. It is safe for concurrent
// use: step heartbeats and command output may interleave.
type progress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// Write lets verbose mode forward command output lines (already split
// by outputSink) without interleaving them with stage lines.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Write(b)
}

// step announces name, runs fn and reports how long it took. While fn
// runs, a heartbeat shows the elapsed time and, if tail is set, the last
// line of output, so a 90 s apt-get does not look hung.
func (p *progress) step(name string, tail *outputSink, fn func() error) error {
	start := time.Now()
	p.printf("%s ...", name)
	err := withHeartbeat(fn, func(elapsed time.Duration) {
		last := ""
		if tail != nil && !tail.verbose {
			last = "  " + truncate(tail.lastLine(), 72)
		}
		p.printf("%s ... %ds%s", name, int(elapsed.Seconds()), last)
	})
	if err != nil {
		p.printf("%s failed after %.1fs", name, time.Since(start).Seconds())
		return err
	}
	p.printf("%s done (%.1fs)", name, time.Since(start).Seconds())
	return nil
}

// withHeartbeat runs fn, calling beat every heartbeat while it runs with
// the time since it started.
func withHeartbeat(fn func() error, beat func(elapsed time.Duration)) error {
	start := time.Now()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				beat(time.Since(start))
			}
		}
	}()
	err := fn()
	close(done)
	<-stopped
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// outputSink receives a command's stdout and stderr: everything goes to
// the build log; complete lines also go, indented, to the progress writer
// in verbose mode; the last line is kept for heartbeats and errors.
type outputSink struct {
	log     io.Writer
	prog    io.Writer // nil unless verbose
	verbose bool

	mu      sync.Mutex
	partial []byte
	tail    []string // last few lines, for error messages
}

const tailLines = 8

func (s *outputSink) Write(b []byte) (int, error) {
	if _, err := s.log.Write(b); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, b...)
	for {
		// apt and dpkg redraw with \r; treat it as a line end.
		i := bytes.IndexAny(s.partial, "\r\n")
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(s.partial[:i]))
		s.partial = s.partial[i+1:]
		if line == "" {
			continue
		}
		s.tail = append(s.tail, line)
		if len(s.tail) > tailLines {
			s.tail = s.tail[1:]
		}
		if s.prog != nil {
			io.WriteString(s.prog, "    "+line+"\n")
		}
	}
	return len(b), nil
}

func (s *outputSink) lastLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tail) == 0 {
		return ""
	}
	return s.tail[len(s.tail)-1]
}

// lastLines is the recent output, for an error message.
func (s *outputSink) lastLines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.tail
	if p := strings.TrimSpace(string(s.partial)); p != "" {
		lines = append(lines[:len(lines):len(lines)], p)
	}
	return strings.Join(lines, "\n")
}
