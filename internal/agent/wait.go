package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// waitPoll is how often Wait looks at the file. Polling is simple and
// works on every file system gVisor offers, which inotify does not.
const waitPoll = 15 * time.Millisecond

// Wait blocks until the file contains the request's text.
func (a *Agent) Wait(ctx context.Context, req agentproto.WaitRequest) (agentproto.WaitResult, error) {
	var res agentproto.WaitResult
	if req.Text == "" {
		return res, agentproto.Errorf(agentproto.CodeInvalid, "wait needs a text to look for")
	}
	if req.TimeoutMs < 0 {
		return res, agentproto.Errorf(agentproto.CodeInvalid, "timeout must not be negative")
	}
	p, err := a.resolve(req.Path)
	if err != nil {
		return res, err
	}
	timeout := agentproto.DefaultWaitTimeout
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()

	s := &scanner{path: p, text: []byte(req.Text)}
	defer s.close()
	for {
		found, err := s.scan()
		if err != nil {
			return res, err
		}
		if found {
			res.Found = true
			res.ElapsedMs = time.Since(start).Milliseconds()
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-deadline.C:
			// One last look, so that text written just before the
			// deadline counts.
			found, err := s.scan()
			res.Found = found
			res.ElapsedMs = time.Since(start).Milliseconds()
			return res, err
		case <-tick.C:
		}
	}
}

// scanner looks for text in a growing file, reading each byte once.
type scanner struct {
	path string
	text []byte

	f    *os.File
	fi   fs.FileInfo // of f, to notice the file being replaced
	off  int64       // bytes of f already searched
	tail []byte      // the last len(text)-1 bytes searched, for a split match
	buf  []byte
}

// scan reads what was appended since the last scan and reports whether
// the text has appeared. A file that does not exist yet is not an error.
func (s *scanner) scan() (bool, error) {
	fi, err := os.Stat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		s.close()
		return false, nil
	}
	if err != nil {
		return false, fsError(err)
	}
	if err := checkRegular(s.path, fi); err != nil {
		return false, err
	}
	if s.f == nil || !os.SameFile(fi, s.fi) {
		if err := s.open(); err != nil {
			return false, err
		}
	} else if fi.Size() < s.off {
		// Truncated: whatever is there now is new.
		s.off, s.tail = 0, s.tail[:0]
	}
	if s.f == nil {
		return false, nil
	}
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	for {
		n, err := s.f.ReadAt(s.buf, s.off)
		if n > 0 {
			s.off += int64(n)
			data := append(s.tail, s.buf[:n]...)
			if bytes.Contains(data, s.text) {
				return true, nil
			}
			keep := min(len(s.text)-1, len(data))
			s.tail = append(s.tail[:0], data[len(data)-keep:]...)
		}
		if err == io.EOF || n == 0 {
			return false, nil
		}
		if err != nil {
			return false, fsError(err)
		}
	}
}

// open (re)opens the file from its start.
func (s *scanner) open() error {
	s.close()
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone again; look next time
	}
	if err != nil {
		return fsError(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fsError(err)
	}
	s.f, s.fi = f, fi
	return nil
}

func (s *scanner) close() {
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.fi, s.off, s.tail = nil, nil, 0, s.tail[:0]
}
