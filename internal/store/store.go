// Package store keeps cove's durable state in SQLite (the pure-Go
// modernc.org/sqlite driver, so the binary needs no cgo): what sandboxes
// exist, their expiry and token hashes. The daemon rebuilds everything else
// from it after a restart.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is returned for a record that does not exist.
var ErrNotFound = errors.New("not found")

// Store is the daemon's database.
type Store struct {
	db *sql.DB
}

// Sandbox is one sandbox's durable record.
type Sandbox struct {
	ID          string
	Status      string
	Backend     string
	Image       string // image id
	SnapshotTag string
	CPUs        int
	MemoryMiB   int
	TokenHash   string // hex sha256 of the sandbox token
	CreatedAt   time.Time
	ExpiresAt   time.Time
	Limits      // disk, processes, open files
	// NetworkJSON is the sandbox's egress policy, as JSON; "" for none given.
	NetworkJSON string
	Meta        // labels and default user
	Lifecycle   // pause and expiry policy, and a paused one's state
	// Tenant owns the sandbox; "" is written as the default tenant.
	Tenant string
}

const schema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	id           TEXT PRIMARY KEY,
	status       TEXT NOT NULL,
	backend      TEXT NOT NULL,
	image        TEXT NOT NULL,
	snapshot_tag TEXT NOT NULL DEFAULT '',
	cpus         INTEGER NOT NULL,
	memory_mib   INTEGER NOT NULL,
	token_hash   TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL
);
`

// Limits are a sandbox's bounds beyond its CPUs and memory. A snapshot
// records its sandbox's: they are part of what a checkpoint restores.
// Zero is no bound, as for records made before they existed.
type Limits struct {
	DiskMiB   int // disk space it may write
	Pids      int // processes and threads
	OpenFiles int // open files per process
}

// limitsMigrations add the limits' columns to a database made before
// them; each fails harmlessly ("duplicate column") once applied.
var limitsMigrations = []string{
	`ALTER TABLE sandboxes ADD COLUMN disk_mib INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE sandboxes ADD COLUMN pids INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE sandboxes ADD COLUMN open_files INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE snapshots ADD COLUMN disk_mib INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE snapshots ADD COLUMN pids INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE snapshots ADD COLUMN open_files INTEGER NOT NULL DEFAULT 0`,
}

// Open opens (creating if needed) the database at path.
func Open(ctx context.Context, path string) (*Store, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// One writer at a time is all SQLite allows; a single connection keeps
	// writers from spinning on SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema+snapshotSchema+portsSchema+templateSchema+checkpointsSchema+usageSchema+keysSchema+sealedTokensSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: create schema: %w", err)
	}
	for _, m := range slices.Concat(snapshotMigrations, sandboxMigrations, limitsMigrations, networkMigrations, metaMigrations, lifecycleMigrations, tenantMigrations, keyMigrations) {
		if _, err := db.ExecContext(ctx, m); err != nil && !strings.Contains(err.Error(), "duplicate column") {
			db.Close()
			return nil, fmt.Errorf("store: migrate: %w", err)
		}
	}
	// Token hashes live here: readable by the daemon alone, whatever the
	// directories above allow. The schema writes above made the WAL files.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			db.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// PutSandbox inserts or replaces a sandbox record.
func (s *Store) PutSandbox(ctx context.Context, sb Sandbox) error {
	return putSandbox(ctx, s.db, sb)
}

// Commit ends a call that made sandboxes: it writes their records, with
// the status they are handed out in, and marks the call's snapshot (a
// branch's; "" for none) no longer pending, in one transaction. Until
// then the call's rows say what a restart must undo; a daemon killed at
// any moment leaves the call whole or not at all.
func (s *Store) Commit(ctx context.Context, sandboxes []Sandbox, snapshotTag string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	defer tx.Rollback()
	for _, sb := range sandboxes {
		if err := putSandbox(ctx, tx, sb); err != nil {
			return err
		}
	}
	if snapshotTag != "" {
		res, err := tx.ExecContext(ctx, `UPDATE snapshots SET pending = 0 WHERE tag = ?`, snapshotTag)
		if err != nil {
			return fmt.Errorf("store: commit snapshot %s: %w", snapshotTag, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: snapshot %s: %w", snapshotTag, ErrNotFound)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// execer is what a write needs: the database or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func putSandbox(ctx context.Context, db execer, sb Sandbox) error {
	// An upsert, not INSERT OR REPLACE: a replace deletes the row first,
	// and with it (ON DELETE CASCADE) the sandbox's ports.
	_, err := db.ExecContext(ctx, `INSERT INTO sandboxes
		(id, status, backend, image, snapshot_tag, cpus, memory_mib, token_hash, created_at, expires_at,
		 disk_mib, pids, open_files, network, labels, user, env, cwd,
		 auto_resume, on_expiry, paused_at, paused_left_ms, paused_bytes, tenant)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET status = excluded.status, backend = excluded.backend, image = excluded.image,
		 snapshot_tag = excluded.snapshot_tag, cpus = excluded.cpus, memory_mib = excluded.memory_mib,
		 token_hash = excluded.token_hash, created_at = excluded.created_at, expires_at = excluded.expires_at,
		 disk_mib = excluded.disk_mib, pids = excluded.pids, open_files = excluded.open_files, network = excluded.network,
		 labels = excluded.labels, user = excluded.user, env = excluded.env, cwd = excluded.cwd,
		 auto_resume = excluded.auto_resume, on_expiry = excluded.on_expiry, paused_at = excluded.paused_at,
		 paused_left_ms = excluded.paused_left_ms, paused_bytes = excluded.paused_bytes, tenant = excluded.tenant`,
		sb.ID, sb.Status, sb.Backend, sb.Image, sb.SnapshotTag, sb.CPUs, sb.MemoryMiB, sb.TokenHash,
		sb.CreatedAt.UnixMilli(), sb.ExpiresAt.UnixMilli(), sb.DiskMiB, sb.Pids, sb.OpenFiles, sb.NetworkJSON,
		sb.LabelsJSON, sb.User, sb.EnvJSON, sb.Cwd,
		sb.AutoResume, sb.OnExpiry, unixMilliOrZero(sb.PausedAt), sb.PausedLeft.Milliseconds(), sb.PausedBytes,
		tenantOrDefault(sb.Tenant))
	if err != nil {
		return fmt.Errorf("store: put sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// SetStatus changes a sandbox's status.
func (s *Store) SetStatus(ctx context.Context, id, status string) error {
	return s.update(ctx, id, `UPDATE sandboxes SET status = ? WHERE id = ?`, status, id)
}

// SetExpiry changes when a sandbox expires.
func (s *Store) SetExpiry(ctx context.Context, id string, t time.Time) error {
	return s.update(ctx, id, `UPDATE sandboxes SET expires_at = ? WHERE id = ?`, t.UnixMilli(), id)
}

func (s *Store) update(ctx context.Context, id, q string, args ...any) error {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("store: update sandbox %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: sandbox %s: %w", id, ErrNotFound)
	}
	return nil
}

// DeleteSandbox removes a sandbox record. Deleting a missing one is not an error.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("store: delete sandbox %s: %w", id, err)
	}
	return nil
}

// Sandboxes returns every sandbox record, oldest first.
func (s *Store) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, status, backend, image, snapshot_tag, cpus, memory_mib,
		token_hash, created_at, expires_at, disk_mib, pids, open_files, network, labels, user, env, cwd,
		auto_resume, on_expiry, paused_at, paused_left_ms, paused_bytes, tenant FROM sandboxes ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		var sb Sandbox
		var created, expires, pausedAt, pausedLeft int64
		if err := rows.Scan(&sb.ID, &sb.Status, &sb.Backend, &sb.Image, &sb.SnapshotTag, &sb.CPUs,
			&sb.MemoryMiB, &sb.TokenHash, &created, &expires, &sb.DiskMiB, &sb.Pids, &sb.OpenFiles, &sb.NetworkJSON,
			&sb.LabelsJSON, &sb.User, &sb.EnvJSON, &sb.Cwd,
			&sb.AutoResume, &sb.OnExpiry, &pausedAt, &pausedLeft, &sb.PausedBytes, &sb.Tenant); err != nil {
			return nil, fmt.Errorf("store: scan sandbox: %w", err)
		}
		sb.CreatedAt = time.UnixMilli(created)
		sb.ExpiresAt = time.UnixMilli(expires)
		sb.PausedAt, sb.PausedLeft = timeOrZero(pausedAt), time.Duration(pausedLeft)*time.Millisecond
		out = append(out, sb)
	}
	return out, rows.Err()
}
