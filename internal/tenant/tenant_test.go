package tenant

import (
	"context"
	"testing"
)

func TestOf(t *testing.T) {
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"none", context.Background(), Default},
		{"empty tenant", NewContext(context.Background(), Principal{KeyID: "k"}), Default},
		{"tenant", NewContext(context.Background(), Principal{Tenant: "acme"}), "acme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.ctx); got != tt.want {
				t.Fatalf("Of = %q, want %q", got, tt.want)
			}
		})
	}
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("FromContext on a bare context reported a principal")
	}
}

func TestCanSee(t *testing.T) {
	bg := context.Background()
	acme := NewContext(bg, Principal{Tenant: "acme"})
	admin := NewContext(bg, Principal{Tenant: Default, Admin: true})
	tests := []struct {
		name        string
		ctx         context.Context
		owner       string
		see, change bool
	}{
		{"daemon sees another's", bg, "acme", true, true},
		{"daemon deletes shared", bg, Shared, true, true},
		{"own", acme, "acme", true, true},
		{"another tenant's", acme, "other", false, false},
		{"default tenant's", acme, Default, false, false},
		{"shared: seen, not deleted", acme, Shared, true, false},
		{"admin sees another's", admin, "acme", true, true},
		{"admin deletes shared", admin, Shared, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanSee(tt.ctx, tt.owner); got != tt.see {
				t.Errorf("CanSee = %v, want %v", got, tt.see)
			}
			if got := CanChange(tt.ctx, tt.owner); got != tt.change {
				t.Errorf("CanChange = %v, want %v", got, tt.change)
			}
		})
	}
	if Owner(bg, Shared) != Shared || Owner(acme, Shared) != "acme" || Owner(bg, Default) != Default {
		t.Error("Owner: the principal's tenant, else the unowned value")
	}
}
