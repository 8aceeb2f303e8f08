package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sealedTokensSchema keeps, beside a sandbox's token hash, its token
// sealed (encrypted) with a key the daemon derives from its own secret, so
// that an API key allowed to see tokens (the E2B facade's connect) can be
// given it again after create, across restarts. The row goes with its
// sandbox's.
const sealedTokensSchema = `
CREATE TABLE IF NOT EXISTS sealed_tokens (
	id     TEXT PRIMARY KEY REFERENCES sandboxes(id) ON DELETE CASCADE,
	sealed TEXT NOT NULL
);
`

// PutSealedToken records sandbox id's sealed token.
func (s *Store) PutSealedToken(ctx context.Context, id, sealed string) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO sealed_tokens (id, sealed) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET sealed = excluded.sealed`, id, sealed); err != nil {
		return fmt.Errorf("store: put sealed token %s: %w", id, err)
	}
	return nil
}

// SealedToken returns sandbox id's sealed token, or ErrNotFound.
func (s *Store) SealedToken(ctx context.Context, id string) (string, error) {
	var sealed string
	err := s.db.QueryRowContext(ctx, `SELECT sealed FROM sealed_tokens WHERE id = ?`, id).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("store: sealed token %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: sealed token %s: %w", id, err)
	}
	return sealed, nil
}
