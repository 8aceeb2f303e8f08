package store

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
