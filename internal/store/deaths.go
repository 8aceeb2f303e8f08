package store

import (
	"context"
	"fmt"
	"time"
)

// Death is why and when a sandbox died: its runtime process ended while
// it ran. Its row stays, with status "dead", until the daemon forgets it.
type Death struct {
	Reason string // apitype.Dead*
	Detail string // what the runtime said, if anything
	At     time.Time
}

// sandboxMigrations bring a database made by an earlier version up to
// date; each fails harmlessly ("duplicate column") once applied.
var sandboxMigrations = []string{
	`ALTER TABLE sandboxes ADD COLUMN dead_reason TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN dead_detail TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN died_at INTEGER NOT NULL DEFAULT 0`,
}

// SetDead records that a sandbox died, and sets its status to status.
func (s *Store) SetDead(ctx context.Context, id, status string, d Death) error {
	return s.update(ctx, id, `UPDATE sandboxes SET status = ?, dead_reason = ?, dead_detail = ?, died_at = ? WHERE id = ?`,
		status, d.Reason, d.Detail, d.At.UnixMilli(), id)
}

// Deaths returns the death of every sandbox recorded as dead, by id.
func (s *Store) Deaths(ctx context.Context) (map[string]Death, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, dead_reason, dead_detail, died_at FROM sandboxes WHERE died_at > 0`)
	if err != nil {
		return nil, fmt.Errorf("store: list deaths: %w", err)
	}
	defer rows.Close()
	out := map[string]Death{}
	for rows.Next() {
		var id string
		var d Death
		var at int64
		if err := rows.Scan(&id, &d.Reason, &d.Detail, &at); err != nil {
			return nil, fmt.Errorf("store: scan death: %w", err)
		}
		d.At = time.UnixMilli(at)
		out[id] = d
	}
	return out, rows.Err()
}
