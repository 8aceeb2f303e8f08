package tenant

import "context"

// Shared owns what the daemon makes for everyone, with no principal (the
// golden snapshot built at start): every tenant sees it and spawns from
// it, and only admins and the daemon itself may delete it. No tenant can
// be named so: tenant names are [a-z0-9-].
const Shared = "*"

// CanSee reports whether ctx's caller may see a thing that owner owns.
// The daemon's own work (no principal: recovery, the reaper, warm pools)
// and admin keys see everything; any other key sees its tenant's things
// and the shared ones. Whatever it may not see is, to it, not there.
func CanSee(ctx context.Context, owner string) bool {
	p, ok := FromContext(ctx)
	if !ok || p.Admin || owner == Shared {
		return true
	}
	return owner == Of(ctx)
}

// CanChange reports whether ctx's caller may delete (or rebuild) a thing
// that owner owns: as CanSee, but a shared thing only for an admin or the
// daemon itself.
func CanChange(ctx context.Context, owner string) bool {
	if p, ok := FromContext(ctx); ok && !p.Admin && owner == Shared {
		return false
	}
	return CanSee(ctx, owner)
}

// Owner is the tenant what ctx makes belongs to: the principal's, or
// without one (the daemon's own work) unowned, which is Default for a
// sandbox and Shared for a snapshot or template (pass which).
func Owner(ctx context.Context, unowned string) string {
	if _, ok := FromContext(ctx); ok {
		return Of(ctx)
	}
	return unowned
}

// LimitsOf are the quota limits ctx's caller is held to: none without a
// principal.
func LimitsOf(ctx context.Context) Limits {
	p, _ := FromContext(ctx)
	return p.Limits
}
