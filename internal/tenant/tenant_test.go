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
