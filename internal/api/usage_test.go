package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fakeUsage answers every report with in-use figures, recording what it
// was asked.
type fakeUsage struct {
	tenant   string
	from, to time.Time
}

func (f *fakeUsage) Report(_ context.Context, name string, from, to time.Time) (apitype.Usage, error) {
	f.tenant, f.from, f.to = name, from, to
	return apitype.Usage{Tenant: name, From: from, To: to, InUse: apitype.UsageInUse{Sandboxes: 2, VCPUs: 3, MemoryMiB: 512},
		Totals: apitype.UsageFigures{Execs: 7}}, nil
}

func (f *fakeUsage) TenantOf(string) (string, bool) { return "", false }

func TestGetUsage(t *testing.T) {
	km := newTestKeys(t, "key")
	acme := mustKey(t, km, keys.CreateOptions{Name: "acme", Tenant: "acme", Limits: tenant.Limits{MaxSandboxes: 5, MaxMemoryMiB: 2048}})
	admin := mustKey(t, km, keys.CreateOptions{Name: "ops", Tenant: "ops", Admin: true})
	tests := []struct {
		name       string
		principal  string // its key; "": the daemon's
		query      string
		status     int
		wantTenant string
		check      func(t *testing.T, u apitype.Usage)
	}{
		{name: "single key: default tenant, this month", query: "", status: http.StatusOK, wantTenant: tenant.Default},
		{name: "own tenant with its quota", principal: acme, query: "?from=1773100800&to=2026-03-11T00:00:00Z", status: http.StatusOK, wantTenant: "acme",
			check: func(t *testing.T, u apitype.Usage) {
				if u.Quota.MaxSandboxes != 5 || u.Remaining.Sandboxes == nil || *u.Remaining.Sandboxes != 3 ||
					u.Remaining.MemoryMiB == nil || *u.Remaining.MemoryMiB != 1536 || u.Remaining.VCPUs != nil {
					t.Errorf("quota %+v remaining %+v", u.Quota, u.Remaining)
				}
				if !u.From.Equal(time.Unix(1773100800, 0)) || u.Totals.Execs != 7 {
					t.Errorf("usage = %+v", u)
				}
			}},
		{name: "own tenant named", principal: acme, query: "?tenant=acme", status: http.StatusOK, wantTenant: "acme"},
		{name: "another tenant, not admin", principal: acme, query: "?tenant=globex", status: http.StatusNotFound},
		{name: "another tenant, admin", principal: admin, query: "?tenant=globex", status: http.StatusOK, wantTenant: "globex",
			check: func(t *testing.T, u apitype.Usage) {
				if u.InUse.DiskMiB == nil || *u.InUse.DiskMiB != 42 || u.Quota.MaxVCPUs != 9 || *u.Remaining.VCPUs != 6 {
					t.Errorf("admin's view of globex: in use %+v quota %+v", u.InUse, u.Quota)
				}
			}},
		{name: "reversed", query: "?from=2026-03-11T00:00:00Z&to=2026-03-10T00:00:00Z", status: http.StatusBadRequest},
		{name: "bad from", query: "?from=last-week", status: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fu := &fakeUsage{}
			srv := New(Config{APIKey: "key", Keys: km, Usage: fu, UsageQuotas: UsageQuotas{
				Limits: func(_ context.Context, name string) (tenant.Limits, bool) {
					return tenant.Limits{MaxVCPUs: 9}, name == "globex"
				},
				DiskMiB: func(_ context.Context, name string) (int64, bool) { return 42, name == "globex" },
			}})
			r := httptest.NewRequest(http.MethodGet, "/v1/usage"+tt.query, nil)
			key := "key"
			if tt.principal != "" {
				key = tt.principal
			}
			r.Header.Set("Authorization", "Bearer "+key)
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if tt.status != http.StatusOK {
				if fu.tenant != "" {
					t.Errorf("a refused call read tenant %q's usage", fu.tenant)
				}
				var e apitype.ErrorBody
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
					t.Errorf("error body %s: %v", w.Body, err)
				}
				return
			}
			var u apitype.Usage
			if err := json.Unmarshal(w.Body.Bytes(), &u); err != nil {
				t.Fatal(err)
			}
			if fu.tenant != tt.wantTenant || u.Tenant != tt.wantTenant {
				t.Errorf("tenant asked %q, answered %q; want %q", fu.tenant, u.Tenant, tt.wantTenant)
			}
			if tt.query == "" {
				now := time.Now().UTC()
				if fu.from.Day() != 1 || fu.from.Month() != now.Month() || time.Since(fu.to) > time.Minute {
					t.Errorf("default range %v - %v", fu.from, fu.to)
				}
			}
			if tt.check != nil {
				tt.check(t, u)
			}
		})
	}
}

func TestGetUsageWithoutMeter(t *testing.T) {
	srv := New(Config{APIKey: "key"})
	r := httptest.NewRequest(http.MethodGet, "/v1/usage", nil)
	r.Header.Set("Authorization", "Bearer key")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
}
