package obs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// DefaultAuditMaxBytes is the size at which the audit log is rotated.
const DefaultAuditMaxBytes = 64 << 20

// AuditEntry is one line of the audit log: one mutating call.
type AuditEntry struct {
	Time       time.Time `json:"time"`
	RequestID  string    `json:"request_id"`
	Who        string    `json:"who"` // "KEY-ID@TENANT", plus "+sandbox_token" if one was sent, or "anonymous"
	Method     string    `json:"method"`
	Route      string    `json:"route"`
	SandboxID  string    `json:"sandbox_id,omitempty"`
	Status     int       `json:"status"`
	Code       string    `json:"code,omitempty"`
	DurationMs float64   `json:"duration_ms"`
	Remote     string    `json:"remote,omitempty"`
}

// Audit appends JSON lines to a file. It is bounded simply: when the file
// would pass MaxBytes it is renamed to PATH.1 (replacing the previous
// one) and a new file begun, so at most two files of about MaxBytes each
// are kept.
type Audit struct {
	path string
	max  int64

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenAudit opens (creating, appending to) the audit log at path,
// rotated at maxBytes (0: DefaultAuditMaxBytes).
func OpenAudit(path string, maxBytes int64) (*Audit, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultAuditMaxBytes
	}
	a := &Audit{path: path, max: maxBytes}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Audit) open() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	a.f, a.size = f, st.Size()
	return nil
}

// Write appends e as one line.
func (a *Audit) Write(e AuditEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return fmt.Errorf("audit log: closed")
	}
	if a.size > 0 && a.size+int64(len(line)) > a.max {
		if err := a.rotate(); err != nil {
			return err
		}
	}
	n, err := a.f.Write(line)
	a.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

func (a *Audit) rotate() error {
	a.f.Close()
	a.f = nil
	if err := os.Rename(a.path, a.path+".1"); err != nil {
		return fmt.Errorf("audit log: rotate: %w", err)
	}
	return a.open()
}

// Close closes the file.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
