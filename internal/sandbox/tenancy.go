package sandbox

import (
	"context"

	"github.com/cove-sandbox/cove/internal/tenant"
)

// Tenancy: every sandbox and snapshot records the tenant that owns it
// (store's tenant column), and every call answers only for what its
// caller may see (tenant.CanSee): another tenant's is not found, in the
// same words as an id that names nothing. The daemon's own work (recovery,
// the reaper, warm pools) carries no principal and sees everything.

// owner is the tenant b belongs to; a pooled sandbox belongs to nobody
// until a spawn hands it out.
func (b *box) owner() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec.Tenant
}

func (b *box) setTenant(t string) {
	b.mu.Lock()
	b.rec.Tenant = t
	b.mu.Unlock()
}

func (b *box) visible(ctx context.Context) bool { return tenant.CanSee(ctx, b.owner()) }

// visible reports whether ctx's caller may see sn. A snapshot built with
// no principal (the golden one) is shared.
func (sn *snap) visible(ctx context.Context) bool { return tenant.CanSee(ctx, sn.rec.Tenant) }

// sandboxOwner is the tenant that the sandboxes ctx makes belong to.
func sandboxOwner(ctx context.Context) string { return tenant.Owner(ctx, tenant.Default) }

// snapshotOwner is the tenant of a snapshot ctx builds from an image: the
// daemon's own (no principal) are shared.
func snapshotOwner(ctx context.Context) string { return tenant.Owner(ctx, tenant.Shared) }
