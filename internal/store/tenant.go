package store

import (
	"context"
	"fmt"
)

// tenantMigrations give every record the tenant it belongs to. A database
// made before tenants existed holds only the default tenant's things, which
// is what the column's default says; each fails harmlessly ("duplicate
// column") once applied.
var tenantMigrations = []string{
	`ALTER TABLE sandboxes ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'`,
	`ALTER TABLE snapshots ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'`,
	`ALTER TABLE templates ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'`,
}

// tenantOrDefault is the tenant a record is written with: records made
// without one (tests, internal callers) are the default tenant's.
func tenantOrDefault(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// SetSnapshotTenant gives a snapshot another owner: the daemon's golden
// snapshot, saved before tenants existed, becomes shared.
func (s *Store) SetSnapshotTenant(ctx context.Context, tag, tenant string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET tenant = ? WHERE tag = ?`, tenantOrDefault(tenant), tag)
	if err != nil {
		return fmt.Errorf("store: set the tenant of snapshot %s: %w", tag, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: snapshot %s: %w", tag, ErrNotFound)
	}
	return nil
}
