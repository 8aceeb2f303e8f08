package keys

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

const boot = "b00t5ecret"

func newManager(t *testing.T) (*Manager, *store.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cove.db")
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := New(context.Background(), Config{Store: st, Bootstrap: boot})
	if err != nil {
		t.Fatal(err)
	}
	return m, st, path
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t)
	k, secret, err := m.Create(ctx, CreateOptions{Name: "ci", Tenant: "acme", Limits: tenant.Limits{MaxSandboxes: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) != 64 || strings.Trim(secret, "0123456789abcdef") != "" {
		t.Fatalf("secret %q: want 64 lowercase hex digits", secret)
	}
	if !strings.HasPrefix(k.ID, "key-") || len(k.ID) != len("key-")+12 {
		t.Fatalf("id %q: want key-<12 hex>", k.ID)
	}
	gone, goneSecret, err := m.Create(ctx, CreateOptions{Name: "old", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Revoke(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	bootP := tenant.Principal{KeyID: BootstrapID, KeyName: BootstrapID, Tenant: tenant.Default, Admin: true, RevealTokens: true}
	keyP := tenant.Principal{KeyID: k.ID, KeyName: "ci", Tenant: "acme", Limits: tenant.Limits{MaxSandboxes: 3}, RevealTokens: true}
	tests := []struct {
		name string
		key  string
		want tenant.Principal
		ok   bool
	}{
		{"bootstrap", boot, bootP, true},
		{"bootstrap with e2b prefix", "e2b_" + boot, bootP, true},
		{"new key", secret, keyP, true},
		{"new key with e2b prefix", "e2b_" + secret, keyP, true},
		{"empty", "", tenant.Principal{}, false},
		{"prefix alone", "e2b_", tenant.Principal{}, false},
		{"wrong", strings.Repeat("0", 64), tenant.Principal{}, false},
		{"bootstrap's prefix", boot[:4], tenant.Principal{}, false},
		{"revoked", goneSecret, tenant.Principal{}, false},
		{"revoked with e2b prefix", "e2b_" + goneSecret, tenant.Principal{}, false},
		{"the hash, not the key", Hash(secret), tenant.Principal{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.Resolve(tt.key)
			if !tt.ok {
				if !errors.Is(err, ErrUnauthorized) {
					t.Fatalf("Resolve = %+v, %v; want ErrUnauthorized", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Resolve = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestCreateInvalid(t *testing.T) {
	ctx := context.Background()
	m, st, _ := newManager(t)
	tests := []struct {
		name string
		o    CreateOptions
		want string
	}{
		{"no name", CreateOptions{Tenant: "acme"}, "name is required"},
		{"blank name", CreateOptions{Name: "  ", Tenant: "acme"}, "name is required"},
		{"long name", CreateOptions{Name: strings.Repeat("n", MaxNameLen+1), Tenant: "acme"}, "at most 128"},
		{"control in name", CreateOptions{Name: "a\nb", Tenant: "acme"}, "control characters"},
		{"no tenant", CreateOptions{Name: "n"}, "tenant is required"},
		{"upper tenant", CreateOptions{Name: "n", Tenant: "Acme"}, `tenant "Acme"`},
		{"leading dash", CreateOptions{Name: "n", Tenant: "-acme"}, `tenant "-acme"`},
		{"slash", CreateOptions{Name: "n", Tenant: "a/b"}, `tenant "a/b"`},
		{"tenant too long", CreateOptions{Name: "n", Tenant: strings.Repeat("a", 64)}, "tenant"},
		{"negative sandboxes", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxSandboxes: -1}}, "max_sandboxes=-1"},
		{"negative vcpus", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxVCPUs: -2}}, "max_vcpus=-2"},
		{"negative memory", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxMemoryMiB: -1}}, "max_memory_mib=-1"},
		{"negative ttl", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxTTLSecs: -1}}, "max_ttl_secs=-1"},
		{"negative spawn", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxSpawnN: -1}}, "max_spawn_n=-1"},
		{"negative disk", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxDiskMiB: -1}}, "max_disk_mib=-1"},
		{"oversized memory", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxMemoryMiB: MaxQuota + 1}}, "max_memory_mib=2147483648"},
		{"oversized ttl", CreateOptions{Name: "n", Tenant: "acme", Limits: tenant.Limits{MaxTTLSecs: 1 << 40}}, "max_ttl_secs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, secret, err := m.Create(ctx, tt.o)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || secret != "" {
				t.Fatalf("Create = %q, %v; want ErrInvalid naming %q", secret, err, tt.want)
			}
		})
	}
	if all, err := st.Keys(ctx); err != nil || len(all) != 0 {
		t.Fatalf("invalid creates left keys: %+v, %v", all, err)
	}
	// The edges are fine.
	for _, o := range []CreateOptions{
		{Name: "n", Tenant: "a"},
		{Name: "n", Tenant: "0-" + strings.Repeat("z", 61)},
		{Name: "名前 with spaces", Tenant: "acme", Limits: tenant.Limits{MaxSandboxes: MaxQuota, MaxMemoryMiB: MaxQuota}},
	} {
		if _, _, err := m.Create(ctx, o); err != nil {
			t.Fatalf("Create(%+v): %v", o, err)
		}
	}
}

func TestRevokeCancelsInFlight(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t)
	a, aSecret, err := m.Create(ctx, CreateOptions{Name: "a", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	_, bSecret, err := m.Create(ctx, CreateOptions{Name: "b", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var hooked []string
	m.OnRevoke(func(id string) { hooked = append(hooked, id) })

	a1, p, rel1, err := m.Authenticate(ctx, aSecret)
	if err != nil || p.KeyID != a.ID {
		t.Fatalf("Authenticate(a) = %+v, %v", p, err)
	}
	if got, ok := tenant.FromContext(a1); !ok || got != p {
		t.Fatalf("context carries %+v, %v; want %+v", got, ok, p)
	}
	a2, _, rel2, _ := m.Authenticate(ctx, "e2b_"+aSecret)
	b1, _, relB, _ := m.Authenticate(ctx, bSecret)
	boot1, _, relBoot, _ := m.Authenticate(ctx, boot)
	defer relB()
	defer relBoot()
	_, _, rel3, _ := m.Authenticate(ctx, aSecret)
	rel3() // released: no longer in flight
	if n := m.InFlight(a.ID); n != 2 {
		t.Fatalf("InFlight(a) = %d, want 2", n)
	}

	if err := m.Revoke(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	for i, c := range []context.Context{a1, a2} {
		select {
		case <-c.Done():
			if !errors.Is(context.Cause(c), ErrRevoked) {
				t.Fatalf("request %d: cause %v, want ErrRevoked", i, context.Cause(c))
			}
		default:
			t.Fatalf("request %d of the revoked key still open", i)
		}
	}
	for i, c := range []context.Context{b1, boot1} {
		if c.Err() != nil {
			t.Fatalf("other request %d cancelled: %v", i, c.Err())
		}
	}
	if len(hooked) != 1 || hooked[0] != a.ID {
		t.Fatalf("OnRevoke hooks got %v", hooked)
	}
	rel1()
	rel2() // after the revocation: harmless
	if _, _, _, err := m.Authenticate(ctx, aSecret); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("revoked key authenticated: %v", err)
	}

	tests := []struct {
		name string
		id   string
		want error
	}{
		{"again", a.ID, nil},
		{"unknown", "key-000000000000", ErrNotFound},
		{"bootstrap", BootstrapID, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := m.Revoke(ctx, tt.id); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Revoke(%s) = %v, want %v", tt.id, err, tt.want)
			}
		})
	}
}

func TestDurable(t *testing.T) {
	ctx := context.Background()
	m, st, _ := newManager(t)
	now := time.Now()
	clock := func() time.Time { return now }
	m.now = clock
	live, liveSecret, _ := m.Create(ctx, CreateOptions{Name: "live", Tenant: "acme", Admin: true, Limits: tenant.Limits{MaxVCPUs: 8}})
	now = now.Add(time.Second)
	gone, goneSecret, _ := m.Create(ctx, CreateOptions{Name: "gone", Tenant: "acme"})
	if err := m.Revoke(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	// A new manager over the same store: what a daemon restart makes.
	m2, err := New(ctx, Config{Store: st, Bootstrap: boot})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := m2.Resolve(liveSecret); err != nil || p.KeyID != live.ID || !p.Admin || p.Limits.MaxVCPUs != 8 {
		t.Fatalf("live key after restart: %+v, %v", p, err)
	}
	if _, err := m2.Resolve(goneSecret); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("revoked key after restart: %v", err)
	}
	list, err := m2.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if list[0].ID != live.ID || !list[0].RevokedAt.IsZero() || list[1].ID != gone.ID || list[1].RevokedAt.IsZero() {
		t.Fatalf("List = %+v", list)
	}
}

func TestTenantLimits(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t)
	now := time.Now()
	m.now = func() time.Time { return now }
	mk := func(tn string, l tenant.Limits) Key {
		t.Helper()
		now = now.Add(time.Second)
		k, _, err := m.Create(ctx, CreateOptions{Name: "k", Tenant: tn, Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	mk("acme", tenant.Limits{MaxSandboxes: 1})
	newest := mk("acme", tenant.Limits{MaxSandboxes: 2})
	mk("other", tenant.Limits{MaxSandboxes: 9})
	tests := []struct {
		name   string
		tenant string
		want   int
		ok     bool
	}{
		{"newest live key", "acme", 2, true},
		{"other tenant", "other", 9, true},
		{"no keys", "nobody", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ok := m.TenantLimits(tt.tenant)
			if ok != tt.ok || l.MaxSandboxes != tt.want {
				t.Fatalf("TenantLimits(%s) = %+v, %v", tt.tenant, l, ok)
			}
		})
	}
	if err := m.Revoke(ctx, newest.ID); err != nil {
		t.Fatal(err)
	}
	if l, ok := m.TenantLimits("acme"); !ok || l.MaxSandboxes != 1 {
		t.Fatalf("after revoking the newest: %+v, %v", l, ok)
	}
}

// TestRevealTokens: reveal_tokens is on unless switched off, carried on
// the principal, kept across a reload, and on for the bootstrap key.
func TestRevealTokens(t *testing.T) {
	ctx := context.Background()
	st := &MemStore{}
	m, err := New(ctx, Config{Store: st, Bootstrap: "boot"})
	if err != nil {
		t.Fatal(err)
	}
	_, on, err := m.Create(ctx, CreateOptions{Name: "on", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	_, off, err := m.Create(ctx, CreateOptions{Name: "off", Tenant: "acme", HideTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	again, err := New(ctx, Config{Store: st, Bootstrap: "boot"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range []*Manager{m, again} {
		for _, tt := range []struct {
			key  string
			want bool
		}{{on, true}, {E2BPrefix + on, true}, {off, false}, {"boot", true}} {
			p, err := mm.Resolve(tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if p.RevealTokens != tt.want {
				t.Errorf("%s: RevealTokens %v, want %v", p.KeyName, p.RevealTokens, tt.want)
			}
		}
	}
}
