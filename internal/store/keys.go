package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// keysSchema: an API key is kept as the SHA-256 of its secret only. A
// revoked key's row stays (revoked_at set), so its id keeps naming it in
// the audit log and is never handed out again.
const keysSchema = `
CREATE TABLE IF NOT EXISTS keys (
	id             TEXT PRIMARY KEY,
	name           TEXT NOT NULL,
	tenant         TEXT NOT NULL,
	admin          INTEGER NOT NULL DEFAULT 0,
	key_hash       TEXT NOT NULL UNIQUE,
	max_sandboxes  INTEGER NOT NULL DEFAULT 0,
	max_vcpus      INTEGER NOT NULL DEFAULT 0,
	max_memory_mib INTEGER NOT NULL DEFAULT 0,
	max_ttl_secs   INTEGER NOT NULL DEFAULT 0,
	max_spawn_n    INTEGER NOT NULL DEFAULT 0,
	max_disk_mib   INTEGER NOT NULL DEFAULT 0,
	created_at     INTEGER NOT NULL,
	revoked_at     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS keys_tenant ON keys (tenant, created_at);
`

// KeyQuota is a key's quota; a zero field is unlimited.
type KeyQuota struct {
	MaxSandboxes int
	MaxVCPUs     int
	MaxMemoryMiB int64
	MaxTTLSecs   int64
	MaxSpawnN    int
	MaxDiskMiB   int64
}

// Key is an API key's record. RevokedAt is zero while it is live.
type Key struct {
	ID        string
	Name      string
	Tenant    string
	Admin     bool
	Hash      string // hex SHA-256 of the secret
	Quota     KeyQuota
	CreatedAt time.Time
	RevokedAt time.Time
	// RevealTokens lets the key be given its sandboxes' tokens after
	// create (the E2B facade's connect).
	RevealTokens bool
}

// PutKey inserts a new key record; a taken id or hash is ErrExists.
func (s *Store) PutKey(ctx context.Context, k Key) error {
	q := k.Quota
	_, err := s.db.ExecContext(ctx, `INSERT INTO keys
		(id, name, tenant, admin, key_hash, max_sandboxes, max_vcpus, max_memory_mib, max_ttl_secs, max_spawn_n,
		 max_disk_mib, created_at, revoked_at, reveal_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Tenant, k.Admin, k.Hash, q.MaxSandboxes, q.MaxVCPUs, q.MaxMemoryMiB, q.MaxTTLSecs, q.MaxSpawnN,
		q.MaxDiskMiB, k.CreatedAt.UnixMilli(), unixMilliOrZero(k.RevokedAt), k.RevealTokens)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return fmt.Errorf("store: put key %s: %w", k.ID, ErrExists)
		}
		return fmt.Errorf("store: put key %s: %w", k.ID, err)
	}
	return nil
}

// RevokeKey marks key id revoked at t. A key revoked before keeps its
// first revocation time; an unknown id is ErrNotFound.
func (s *Store) RevokeKey(ctx context.Context, id string, t time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE keys SET revoked_at = CASE WHEN revoked_at = 0 THEN ? ELSE revoked_at END
		WHERE id = ?`, max(t.UnixMilli(), 1), id)
	if err != nil {
		return fmt.Errorf("store: revoke key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: key %s: %w", id, ErrNotFound)
	}
	return nil
}

// DeleteKey removes a key record; a missing one is no error.
func (s *Store) DeleteKey(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM keys WHERE id = ?`, id); err != nil {
		return fmt.Errorf("store: delete key %s: %w", id, err)
	}
	return nil
}

const keyColumns = `id, name, tenant, admin, key_hash, max_sandboxes, max_vcpus, max_memory_mib, max_ttl_secs,
	max_spawn_n, max_disk_mib, created_at, revoked_at, reveal_tokens`

// Key returns key id's record, or ErrNotFound.
func (s *Store) Key(ctx context.Context, id string) (Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("store: key %s: %w", id, ErrNotFound)
	}
	return k, err
}

// Keys returns every key record, revoked ones too, oldest first.
func (s *Store) Keys(ctx context.Context) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

type scanner interface{ Scan(dest ...any) error }

func scanKey(r scanner) (Key, error) {
	var k Key
	var created, revoked int64
	q := &k.Quota
	if err := r.Scan(&k.ID, &k.Name, &k.Tenant, &k.Admin, &k.Hash, &q.MaxSandboxes, &q.MaxVCPUs, &q.MaxMemoryMiB,
		&q.MaxTTLSecs, &q.MaxSpawnN, &q.MaxDiskMiB, &created, &revoked, &k.RevealTokens); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Key{}, err
		}
		return Key{}, fmt.Errorf("store: scan key: %w", err)
	}
	k.CreatedAt, k.RevokedAt = time.UnixMilli(created), timeOrZero(revoked)
	return k, nil
}

// keyMigrations add reveal_tokens: whether a key may be given its
// sandboxes' tokens after create. Keys made before it keep the default,
// on, as for a tenant's own key.
var keyMigrations = []string{
	`ALTER TABLE keys ADD COLUMN reveal_tokens INTEGER NOT NULL DEFAULT 1`,
}
