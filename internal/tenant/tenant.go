// Package tenant names who is calling: the principal an API key resolves
// to, carried in a request's context from the API layer down to the
// sandbox service, and the quota limits that principal's tenant is held to.
package tenant

import (
	"context"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Default is the tenant of the daemon's bootstrap key, and of everything
// created before tenants existed, so the single-key set-up needs no config.
const Default = "default"

// Limits bound what a tenant may hold at once; a zero field is unlimited.
// They are the wire type /v1/keys and /v1/usage carry, so one definition
// serves the quota check and its report.
type Limits = apitype.UsageQuota

// Principal is an authenticated caller: the key it presented and the tenant
// that key belongs to.
type Principal struct {
	KeyID   string
	KeyName string
	Tenant  string
	Admin   bool
	Limits  Limits
	// RevealTokens: the key may be given its own tenant's sandbox tokens
	// after create (what E2B's connect hands out).
	RevealTokens bool
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal ctx carries, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Of is the tenant ctx acts for: Default when no principal is attached
// (internal calls: recovery, the reaper, the warm pool).
func Of(ctx context.Context) string {
	if p, ok := FromContext(ctx); ok && p.Tenant != "" {
		return p.Tenant
	}
	return Default
}
