package store

import (
	"context"
	"fmt"
	"time"
)

// Snapshot is one snapshot's durable record.
type Snapshot struct {
	Tag          string
	Parent       string // snapshot the source sandbox was spawned from
	BranchedFrom string // sandbox it was branched from
	Depth        int
	Backend      string
	Image        string // image id
	CPUs         int
	MemoryMiB    int
	PoolSize     int
	SizeBytes    int64
	CreatedAt    time.Time
	// RuntimeVersion is the backend's version that wrote the checkpoint:
	// runsc restores only what its own version saved.
	RuntimeVersion string
	// TokenHash is the hex SHA-256 of the token of the sandbox the snapshot
	// was saved from: it holds that sandbox's state, so spawning from it
	// takes the same credential. Empty for a snapshot built from an image.
	TokenHash string
	// Pending marks a snapshot written by a call that has not answered yet
	// (a branch whose children are starting); a restart drops it.
	Pending bool
	Limits  // disk, processes, open files
	// NetworkJSON is the egress policy its sandboxes start with, as JSON; ""
	// for none given.
	NetworkJSON string
	Meta        // labels and default user its sandboxes inherit
	// Tenant owns the snapshot; "" is written as the default tenant.
	Tenant string
}

const snapshotSchema = `
CREATE TABLE IF NOT EXISTS snapshots (
	tag           TEXT PRIMARY KEY,
	parent        TEXT NOT NULL DEFAULT '',
	branched_from TEXT NOT NULL DEFAULT '',
	depth         INTEGER NOT NULL,
	backend       TEXT NOT NULL,
	image         TEXT NOT NULL,
	cpus          INTEGER NOT NULL,
	memory_mib    INTEGER NOT NULL,
	pool_size     INTEGER NOT NULL,
	size_bytes    INTEGER NOT NULL,
	created_at    INTEGER NOT NULL,
	runtime_version TEXT NOT NULL DEFAULT '',
	token_hash    TEXT NOT NULL DEFAULT '',
	pending       INTEGER NOT NULL DEFAULT 0
);
`

// snapshotMigrations bring a database made by an earlier version up to
// date; each fails harmlessly ("duplicate column") once applied.
var snapshotMigrations = []string{
	`ALTER TABLE snapshots ADD COLUMN runtime_version TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN token_hash TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN pending INTEGER NOT NULL DEFAULT 0`,
}

// PutSnapshot inserts a snapshot record; the tag must be new.
func (s *Store) PutSnapshot(ctx context.Context, sn Snapshot) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO snapshots
		(tag, parent, branched_from, depth, backend, image, cpus, memory_mib, pool_size, size_bytes, created_at,
		runtime_version, token_hash, pending, disk_mib, pids, open_files, network, labels, user, env, cwd, tenant)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sn.Tag, sn.Parent, sn.BranchedFrom, sn.Depth, sn.Backend, sn.Image, sn.CPUs, sn.MemoryMiB,
		sn.PoolSize, sn.SizeBytes, sn.CreatedAt.UnixMilli(), sn.RuntimeVersion, sn.TokenHash, sn.Pending,
		sn.DiskMiB, sn.Pids, sn.OpenFiles, sn.NetworkJSON, sn.LabelsJSON, sn.User, sn.EnvJSON, sn.Cwd, tenantOrDefault(sn.Tenant))
	if err != nil {
		return fmt.Errorf("store: put snapshot %s: %w", sn.Tag, err)
	}
	return nil
}

// DeleteSnapshot removes a snapshot record. Deleting a missing one is not an error.
func (s *Store) DeleteSnapshot(ctx context.Context, tag string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE tag = ?`, tag); err != nil {
		return fmt.Errorf("store: delete snapshot %s: %w", tag, err)
	}
	return nil
}

// Snapshots returns every snapshot record, oldest first.
func (s *Store) Snapshots(ctx context.Context) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tag, parent, branched_from, depth, backend, image, cpus,
		memory_mib, pool_size, size_bytes, created_at, runtime_version, token_hash, pending, disk_mib, pids, open_files, network,
		labels, user, env, cwd, tenant FROM snapshots ORDER BY created_at, tag`)
	if err != nil {
		return nil, fmt.Errorf("store: list snapshots: %w", err)
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		var sn Snapshot
		var created int64
		if err := rows.Scan(&sn.Tag, &sn.Parent, &sn.BranchedFrom, &sn.Depth, &sn.Backend, &sn.Image,
			&sn.CPUs, &sn.MemoryMiB, &sn.PoolSize, &sn.SizeBytes, &created, &sn.RuntimeVersion,
			&sn.TokenHash, &sn.Pending, &sn.DiskMiB, &sn.Pids, &sn.OpenFiles, &sn.NetworkJSON,
			&sn.LabelsJSON, &sn.User, &sn.EnvJSON, &sn.Cwd, &sn.Tenant); err != nil {
			return nil, fmt.Errorf("store: scan snapshot: %w", err)
		}
		sn.CreatedAt = time.UnixMilli(created)
		out = append(out, sn)
	}
	return out, rows.Err()
}
