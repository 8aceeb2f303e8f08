package sandbox

import (
	"context"
	"testing"

	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestRevealToken: a sealed token is given again only to a key of the
// sandbox's tenant with RevealTokens; TokenForCheck gives it to the
// daemon; a daemon without a seal key seals nothing.
func TestRevealToken(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TokenSealKey = make([]byte, 32) })
	acme := tenant.NewContext(context.Background(), tenant.Principal{KeyID: "k1", Tenant: "acme", RevealTokens: true})
	info, err := e.svc.Create(acme, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, tok := info[0].ID, info[0].Token
	tests := []struct {
		name string
		p    tenant.Principal
		want error // nil: the token
	}{
		{"own tenant, reveal", tenant.Principal{KeyID: "k2", Tenant: "acme", RevealTokens: true}, nil},
		{"own tenant, no reveal", tenant.Principal{KeyID: "k3", Tenant: "acme"}, ErrForbidden},
		{"other tenant's admin", tenant.Principal{KeyID: "k4", Tenant: "ops", Admin: true, RevealTokens: true}, ErrForbidden},
		{"other tenant", tenant.Principal{KeyID: "k5", Tenant: "beta", RevealTokens: true}, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.svc.RevealToken(tenant.NewContext(context.Background(), tt.p), id)
			if tt.want != nil {
				wantErr(t, err, tt.want)
				if got != "" {
					t.Fatal("a token with the error")
				}
				return
			}
			if err != nil || got != tok {
				t.Fatalf("RevealToken = %q, %v; want the create's token", got, err)
			}
		})
	}
	if got, err := e.svc.TokenForCheck(context.Background(), id); err != nil || got != tok {
		t.Fatalf("TokenForCheck = %q, %v", got, err)
	}
	// Another seal key opens nothing (a new token file).
	e.svc.cfg.TokenSealKey = append([]byte{1}, make([]byte, 31)...)
	if _, err := e.svc.TokenForCheck(context.Background(), id); err == nil {
		t.Fatal("opened under another key")
	} else {
		wantErr(t, err, ErrConflict)
	}
}

// TestPublicPortsLabel: a sandbox labelled cove.public-ports=true has
// every port public, an exposed one keeping its token.
func TestPublicPortsLabel(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	open := e.createOne(t, CreateOptions{Labels: map[string]string{apitype.LabelPublicPorts: "true"}})
	closed := e.createOne(t, CreateOptions{Labels: map[string]string{apitype.LabelPublicPorts: "no"}})
	if tok, public, err := e.svc.Exposure(open.ID, 8000); err != nil || tok != "" || !public {
		t.Fatalf("labelled, unexposed: %q %v %v", tok, public, err)
	}
	p, err := e.open(t, open.ID, open.Token).ExposePort(ctx, 9000, false)
	if err != nil {
		t.Fatal(err)
	}
	if tok, public, err := e.svc.Exposure(open.ID, 9000); err != nil || tok != p.Token || public {
		t.Fatalf("labelled, exposed with a token: %q %v %v", tok, public, err)
	}
	_, _, err = e.svc.Exposure(closed.ID, 8000)
	wantErr(t, err, ErrNotFound)
}
