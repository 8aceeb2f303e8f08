package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/internal/usage"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// UsageReporter is what GET /v1/usage and the tenant label of the
// sandbox gauge read: internal/usage.Meter.
type UsageReporter interface {
	Report(ctx context.Context, tenantName string, from, to time.Time) (apitype.Usage, error)
	TenantOf(id string) (string, bool)
}

// UsageQuotas look up what GET /v1/usage cannot take from the caller's
// own principal. Each func may be nil.
type UsageQuotas struct {
	// Limits is another tenant's quota, for an admin asking about it.
	Limits func(ctx context.Context, tenantName string) (tenant.Limits, bool)
	// DiskMiB is the disk a tenant's snapshots, templates and paused
	// sandboxes take.
	DiskMiB func(ctx context.Context, tenantName string) (int64, bool)
}

func (s *Server) usageRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /v1/usage", s.auth(s.getUsage))
}

// getUsage answers the calling tenant's usage in ?from&to, or for an
// admin ?tenant='s. A non-admin naming another tenant gets 404, as for any
// of another tenant's things.
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Usage == nil {
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "this daemon meters no usage")
		return
	}
	ctx, q := r.Context(), r.URL.Query()
	from, to, err := usage.ParseRange(q.Get("from"), q.Get("to"), time.Now())
	if errors.Is(err, usage.ErrBadRange) {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	p, hasPrincipal := tenant.FromContext(ctx)
	// No principal is the single API key of a daemon without keys: it
	// may see everything.
	admin := !hasPrincipal || p.Admin
	own := tenant.Of(ctx)
	name := own
	if t := q.Get("tenant"); t != "" && t != own {
		if !admin {
			writeError(w, http.StatusNotFound, apitype.CodeNotFound, fmt.Sprintf("tenant %q not found: a key sees only its own tenant's usage", t))
			return
		}
		name = t
	}
	u, err := s.cfg.Usage.Report(ctx, name, from, to)
	if err != nil {
		s.fail(w, r, fmt.Errorf("read usage of tenant %s: %w", name, err))
		return
	}
	limits := p.Limits
	if name != own {
		limits = tenant.Limits{}
		if f := s.cfg.UsageQuotas.Limits; f != nil {
			limits, _ = f(ctx, name)
		}
	}
	if f := s.cfg.UsageQuotas.DiskMiB; f != nil {
		if mib, ok := f(ctx, name); ok {
			u.InUse.DiskMiB = &mib
		}
	}
	usage.WithQuota(&u, limits)
	writeJSON(w, http.StatusOK, u)
}

// tenantOf is the tenant sandbox id belongs to, for /metrics.
func (s *Server) tenantOf(id string) string {
	if s.cfg.Usage != nil {
		if t, ok := s.cfg.Usage.TenantOf(id); ok {
			return t
		}
	}
	return tenant.Default
}
