package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Lifecycle is what a sandbox does at its expiry and on a call while it
// is paused, and, for a paused one, where its time stood.
type Lifecycle struct {
	// AutoResume: a data-plane call to the paused sandbox resumes it first.
	AutoResume bool
	// OnExpiry is "" or "kill" (destroyed at expiry) or "pause".
	OnExpiry string
	// PausedAt is when it was paused; zero while it runs.
	PausedAt time.Time
	// PausedLeft is what was left of its lifetime when it was paused: a
	// paused sandbox's clock stands still.
	PausedLeft time.Duration
	// PausedBytes is the disk its saved state takes.
	PausedBytes int64
}

// lifecycleMigrations add Lifecycle's columns to a database made before
// them; each fails harmlessly ("duplicate column") once applied.
var lifecycleMigrations = []string{
	`ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE sandboxes ADD COLUMN on_expiry TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN paused_at INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE sandboxes ADD COLUMN paused_left_ms INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE sandboxes ADD COLUMN paused_bytes INTEGER NOT NULL DEFAULT 0`,
}

// checkpointsSchema: a sandbox's named checkpoints go with its row.
const checkpointsSchema = `
CREATE TABLE IF NOT EXISTS checkpoints (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	name       TEXT NOT NULL,
	size_bytes INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (sandbox_id, name)
);
`

// ErrExists is returned for a record whose key is taken.
var ErrExists = errors.New("exists")

// Checkpoint is one saved state of a sandbox, which it can be rolled back to.
type Checkpoint struct {
	SandboxID string
	Name      string
	SizeBytes int64
	CreatedAt time.Time
}

// unixMilliOrZero is t in Unix milliseconds, 0 for the zero time.
func unixMilliOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// timeOrZero undoes unixMilliOrZero.
func timeOrZero(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// SetPaused records a sandbox's status with its pause state and expiry,
// in one write: paused (with l's PausedAt), or running again.
func (s *Store) SetPaused(ctx context.Context, id, status string, l Lifecycle, expires time.Time) error {
	return s.update(ctx, id, `UPDATE sandboxes SET status = ?, paused_at = ?, paused_left_ms = ?, paused_bytes = ?, expires_at = ? WHERE id = ?`,
		status, unixMilliOrZero(l.PausedAt), l.PausedLeft.Milliseconds(), l.PausedBytes, expires.UnixMilli(), id)
}

// PutCheckpoint records a checkpoint; a name the sandbox has used already
// is ErrExists.
func (s *Store) PutCheckpoint(ctx context.Context, c Checkpoint) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO checkpoints (sandbox_id, name, size_bytes, created_at) VALUES (?, ?, ?, ?)`,
		c.SandboxID, c.Name, c.SizeBytes, c.CreatedAt.UnixMilli())
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") || strings.Contains(err.Error(), "PRIMARY KEY") {
			return fmt.Errorf("store: checkpoint %q of sandbox %s: %w", c.Name, c.SandboxID, ErrExists)
		}
		return fmt.Errorf("store: put checkpoint %q of sandbox %s: %w", c.Name, c.SandboxID, err)
	}
	return nil
}

// DeleteCheckpoint forgets a checkpoint. Deleting a missing one is not an error.
func (s *Store) DeleteCheckpoint(ctx context.Context, id, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM checkpoints WHERE sandbox_id = ? AND name = ?`, id, name); err != nil {
		return fmt.Errorf("store: delete checkpoint %q of sandbox %s: %w", name, id, err)
	}
	return nil
}

// Checkpoints returns every checkpoint, by sandbox id, oldest first.
func (s *Store) Checkpoints(ctx context.Context) (map[string][]Checkpoint, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, name, size_bytes, created_at FROM checkpoints ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("store: list checkpoints: %w", err)
	}
	defer rows.Close()
	out := map[string][]Checkpoint{}
	for rows.Next() {
		var c Checkpoint
		var created int64
		if err := rows.Scan(&c.SandboxID, &c.Name, &c.SizeBytes, &created); err != nil {
			return nil, fmt.Errorf("store: scan checkpoint: %w", err)
		}
		c.CreatedAt = time.UnixMilli(created)
		out[c.SandboxID] = append(out[c.SandboxID], c)
	}
	return out, rows.Err()
}
