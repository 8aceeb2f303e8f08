package store

import (
	"context"
	"fmt"
)

// Port is a sandbox's exposed port. Its token is kept as given: the
// daemon hands the same one out again, and compares what a preview request
// brings with it.
type Port struct {
	Port   int
	Public bool
	Token  string
}

// portsSchema: a sandbox's exposed ports go with its row.
const portsSchema = `
CREATE TABLE IF NOT EXISTS ports (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	port       INTEGER NOT NULL,
	public     INTEGER NOT NULL DEFAULT 0,
	token      TEXT NOT NULL,
	PRIMARY KEY (sandbox_id, port)
);
`

// networkMigrations add the network policy's columns (JSON; empty for none)
// to a database made before them; each fails harmlessly ("duplicate
// column") once applied.
var networkMigrations = []string{
	`ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN network TEXT NOT NULL DEFAULT ''`,
}

// SetNetwork changes a sandbox's network policy (JSON).
func (s *Store) SetNetwork(ctx context.Context, id, network string) error {
	return s.update(ctx, id, `UPDATE sandboxes SET network = ? WHERE id = ?`, network, id)
}

// PutPort records an exposed port of a sandbox, or changes it.
func (s *Store) PutPort(ctx context.Context, id string, p Port) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO ports (sandbox_id, port, public, token) VALUES (?, ?, ?, ?)
		ON CONFLICT (sandbox_id, port) DO UPDATE SET public = excluded.public, token = excluded.token`,
		id, p.Port, p.Public, p.Token)
	if err != nil {
		return fmt.Errorf("store: put port %d of sandbox %s: %w", p.Port, id, err)
	}
	return nil
}

// DeletePort forgets an exposed port. Deleting a missing one is not an error.
func (s *Store) DeletePort(ctx context.Context, id string, port int) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM ports WHERE sandbox_id = ? AND port = ?`, id, port); err != nil {
		return fmt.Errorf("store: delete port %d of sandbox %s: %w", port, id, err)
	}
	return nil
}

// Ports returns every sandbox's exposed ports, by sandbox id, in port order.
func (s *Store) Ports(ctx context.Context) (map[string][]Port, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, port, public, token FROM ports ORDER BY sandbox_id, port`)
	if err != nil {
		return nil, fmt.Errorf("store: list ports: %w", err)
	}
	defer rows.Close()
	out := map[string][]Port{}
	for rows.Next() {
		var id string
		var p Port
		if err := rows.Scan(&id, &p.Port, &p.Public, &p.Token); err != nil {
			return nil, fmt.Errorf("store: scan port: %w", err)
		}
		out[id] = append(out[id], p)
	}
	return out, rows.Err()
}
