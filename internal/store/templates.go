package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Template is a template's durable record; its snapshot (of the same
// name) and its step caches are snapshots of their own.
type Template struct {
	Name   string
	Base   string // the FROM reference
	Image  string // the image id it resolved to
	Digest string // sha256 of the Dockerfile
	Key    string // the content hash of the whole build
	// StepsJSON lists the steps and the tags of their caches (JSON).
	StepsJSON string
	BuildTime time.Duration
	CreatedAt time.Time
	// Tenant owns the template; "" is written as the default tenant.
	Tenant string
}

const templateSchema = `
CREATE TABLE IF NOT EXISTS templates (
	name       TEXT PRIMARY KEY,
	base       TEXT NOT NULL,
	image      TEXT NOT NULL,
	digest     TEXT NOT NULL,
	key        TEXT NOT NULL,
	steps      TEXT NOT NULL,
	build_ms   INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
`

// PutTemplate inserts or replaces a template record.
func (s *Store) PutTemplate(ctx context.Context, t Template) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO templates
		(name, base, image, digest, key, steps, build_ms, created_at, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.Name, t.Base, t.Image, t.Digest, t.Key, t.StepsJSON, t.BuildTime.Milliseconds(), t.CreatedAt.UnixMilli(),
		tenantOrDefault(t.Tenant))
	if err != nil {
		return fmt.Errorf("store: put template %s: %w", t.Name, err)
	}
	return nil
}

// DeleteTemplate removes a template record; a missing one is no error.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE name = ?`, name); err != nil {
		return fmt.Errorf("store: delete template %s: %w", name, err)
	}
	return nil
}

// Templates returns every template record by name.
func (s *Store) Templates(ctx context.Context) ([]Template, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, base, image, digest, key, steps, build_ms, created_at, tenant
		FROM templates ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list templates: %w", err)
	}
	defer rows.Close()
	var out []Template
	for rows.Next() {
		var t Template
		var ms, created int64
		if err := rows.Scan(&t.Name, &t.Base, &t.Image, &t.Digest, &t.Key, &t.StepsJSON, &ms, &created, &t.Tenant); err != nil {
			return nil, fmt.Errorf("store: scan template: %w", err)
		}
		t.BuildTime, t.CreatedAt = time.Duration(ms)*time.Millisecond, time.UnixMilli(created)
		out = append(out, t)
	}
	return out, rows.Err()
}

// GetTemplate returns one template record; ok is false when there is none.
func (s *Store) GetTemplate(ctx context.Context, name string) (t Template, ok bool, err error) {
	var ms, created int64
	err = s.db.QueryRowContext(ctx, `SELECT name, base, image, digest, key, steps, build_ms, created_at, tenant
		FROM templates WHERE name = ?`, name).Scan(&t.Name, &t.Base, &t.Image, &t.Digest, &t.Key, &t.StepsJSON, &ms, &created, &t.Tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, false, nil
	}
	if err != nil {
		return Template{}, false, fmt.Errorf("store: get template %s: %w", name, err)
	}
	t.BuildTime, t.CreatedAt = time.Duration(ms)*time.Millisecond, time.UnixMilli(created)
	return t, true, nil
}

// RenameSnapshot gives a snapshot record a new tag and pool size (a
// template build's result taking its name).
func (s *Store) RenameSnapshot(ctx context.Context, from, to string, poolSize int) error {
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET tag = ?, pool_size = ? WHERE tag = ?`, to, poolSize, from)
	if err != nil {
		return fmt.Errorf("store: rename snapshot %s: %w", from, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("store: rename snapshot %s: no such record", from)
	}
	return nil
}
