package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// usageSchema: metering outlives the sandboxes it measured, so neither
// table references sandboxes (no cascade). An interval is a stretch of
// time a sandbox ran with fixed vCPUs and memory; a count is what its
// counters (execs, link bytes) grew by between two flushes, at the time of
// the later one.
const usageSchema = `
CREATE TABLE IF NOT EXISTS usage_intervals (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox_id   TEXT NOT NULL,
	tenant       TEXT NOT NULL,
	template     TEXT NOT NULL,
	vcpus        INTEGER NOT NULL,
	memory_mib   INTEGER NOT NULL,
	started_at   INTEGER NOT NULL,
	ended_at     INTEGER NOT NULL DEFAULT 0,
	seen_at      INTEGER NOT NULL,
	net_in_seen  INTEGER NOT NULL DEFAULT 0,
	net_out_seen INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS usage_intervals_tenant ON usage_intervals (tenant, started_at);
CREATE INDEX IF NOT EXISTS usage_intervals_open ON usage_intervals (ended_at);
CREATE TABLE IF NOT EXISTS usage_counts (
	interval_id INTEGER NOT NULL,
	sandbox_id  TEXT NOT NULL,
	tenant      TEXT NOT NULL,
	template    TEXT NOT NULL,
	at          INTEGER NOT NULL,
	execs       INTEGER NOT NULL,
	bytes_in    INTEGER NOT NULL,
	bytes_out   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_counts_tenant ON usage_counts (tenant, at);
`

// UsageInterval is one stretch of time a sandbox ran. EndedAt is zero while
// it is open. NetInSeen and NetOutSeen are its link's counters as last
// flushed, so a restarted daemon goes on counting from them.
type UsageInterval struct {
	ID         int64
	SandboxID  string
	Tenant     string
	Template   string
	VCPUs      int
	MemoryMiB  int
	StartedAt  time.Time
	EndedAt    time.Time
	SeenAt     time.Time
	NetInSeen  int64
	NetOutSeen int64
}

// UsageCount is what an interval's counters grew by up to At.
type UsageCount struct {
	IntervalID int64
	SandboxID  string
	Tenant     string
	Template   string
	At         time.Time
	Execs      int64
	BytesIn    int64
	BytesOut   int64
}

// UsageFlush is one open interval's state at a flush: when it was last
// seen running, its link counters, and (when not zero) what its counters
// grew by since the flush before.
type UsageFlush struct {
	IntervalID int64
	At         time.Time
	NetInSeen  int64
	NetOutSeen int64
	Count      *UsageCount
}

// OpenUsageInterval records a new open interval and returns its id.
func (s *Store) OpenUsageInterval(ctx context.Context, iv UsageInterval) (int64, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO usage_intervals
		(sandbox_id, tenant, template, vcpus, memory_mib, started_at, seen_at, net_in_seen, net_out_seen)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		iv.SandboxID, iv.Tenant, iv.Template, iv.VCPUs, iv.MemoryMiB, iv.StartedAt.UnixMilli(), iv.StartedAt.UnixMilli(),
		iv.NetInSeen, iv.NetOutSeen)
	if err != nil {
		return 0, fmt.Errorf("store: open usage interval of %s: %w", iv.SandboxID, err)
	}
	return res.LastInsertId()
}

// FlushUsage writes flushes in one transaction; with end set, their
// intervals are closed at their At too.
func (s *Store) FlushUsage(ctx context.Context, flushes []UsageFlush, end bool) error {
	if len(flushes) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: flush usage: %w", err)
	}
	defer tx.Rollback()
	for _, f := range flushes {
		q := `UPDATE usage_intervals SET seen_at = ?, net_in_seen = ?, net_out_seen = ? WHERE id = ?`
		args := []any{f.At.UnixMilli(), f.NetInSeen, f.NetOutSeen, f.IntervalID}
		if end {
			q = `UPDATE usage_intervals SET seen_at = ?, net_in_seen = ?, net_out_seen = ?, ended_at = ? WHERE id = ?`
			args = []any{f.At.UnixMilli(), f.NetInSeen, f.NetOutSeen, max(f.At.UnixMilli(), 1), f.IntervalID}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("store: flush usage interval %d: %w", f.IntervalID, err)
		}
		if c := f.Count; c != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO usage_counts
				(interval_id, sandbox_id, tenant, template, at, execs, bytes_in, bytes_out) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
				f.IntervalID, c.SandboxID, c.Tenant, c.Template, f.At.UnixMilli(), c.Execs, c.BytesIn, c.BytesOut); err != nil {
				return fmt.Errorf("store: usage count of interval %d: %w", f.IntervalID, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: flush usage: %w", err)
	}
	return nil
}

// OpenUsageIntervals returns every interval not yet closed.
func (s *Store) OpenUsageIntervals(ctx context.Context) ([]UsageInterval, error) {
	return s.usageIntervals(ctx, `WHERE ended_at = 0 ORDER BY id`)
}

// UsageIntervals returns tenant's intervals that overlap [from, to).
func (s *Store) UsageIntervals(ctx context.Context, tenant string, from, to time.Time) ([]UsageInterval, error) {
	return s.usageIntervals(ctx, `WHERE tenant = ? AND started_at < ? AND (ended_at = 0 OR ended_at > ?) ORDER BY id`,
		tenant, to.UnixMilli(), from.UnixMilli())
}

// UsageCounts returns tenant's counts made in [from, to).
func (s *Store) UsageCounts(ctx context.Context, tenant string, from, to time.Time) ([]UsageCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT interval_id, sandbox_id, tenant, template, at, execs, bytes_in, bytes_out
		FROM usage_counts WHERE tenant = ? AND at >= ? AND at < ? ORDER BY at`, tenant, from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: usage counts: %w", err)
	}
	defer rows.Close()
	var out []UsageCount
	for rows.Next() {
		var c UsageCount
		var at int64
		if err := rows.Scan(&c.IntervalID, &c.SandboxID, &c.Tenant, &c.Template, &at, &c.Execs, &c.BytesIn, &c.BytesOut); err != nil {
			return nil, fmt.Errorf("store: scan usage count: %w", err)
		}
		c.At = time.UnixMilli(at)
		out = append(out, c)
	}
	return out, rows.Err()
}

// SandboxTenants returns the tenant each of ids was metered for, for those
// that were.
func (s *Store) SandboxTenants(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	for _, id := range ids {
		var t string
		err := s.db.QueryRowContext(ctx, `SELECT tenant FROM usage_intervals WHERE sandbox_id = ? ORDER BY id LIMIT 1`, id).Scan(&t)
		switch {
		case err == sql.ErrNoRows:
		case err != nil:
			return nil, fmt.Errorf("store: tenant of %s: %w", id, err)
		default:
			out[id] = t
		}
	}
	return out, nil
}

func (s *Store) usageIntervals(ctx context.Context, where string, args ...any) ([]UsageInterval, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, sandbox_id, tenant, template, vcpus, memory_mib, started_at, ended_at,
		seen_at, net_in_seen, net_out_seen FROM usage_intervals `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("store: usage intervals: %w", err)
	}
	defer rows.Close()
	var out []UsageInterval
	for rows.Next() {
		var iv UsageInterval
		var started, ended, seen int64
		if err := rows.Scan(&iv.ID, &iv.SandboxID, &iv.Tenant, &iv.Template, &iv.VCPUs, &iv.MemoryMiB, &started, &ended,
			&seen, &iv.NetInSeen, &iv.NetOutSeen); err != nil {
			return nil, fmt.Errorf("store: scan usage interval: %w", err)
		}
		iv.StartedAt, iv.EndedAt, iv.SeenAt = time.UnixMilli(started), timeOrZero(ended), time.UnixMilli(seen)
		out = append(out, iv)
	}
	return out, rows.Err()
}
