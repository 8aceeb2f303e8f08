package mcp

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestExplainQuota: a tenant's quota refusal keeps the daemon's message
// (the quota and its value) and says what to do, apart from the daemon's
// own limit, which shares its status.
func TestExplainQuota(t *testing.T) {
	s := &Server{}
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"quota", &client.Error{Status: http.StatusTooManyRequests, Code: apitype.CodeQuota,
			Message: "quota max_sandboxes=2 of tenant acme: it holds 2, this asks for 1"},
			[]string{"quota max_sandboxes=2 of tenant acme", "at its quota", "get_usage"}},
		{"daemon limit", &client.Error{Status: http.StatusTooManyRequests, Code: apitype.CodeLimit,
			Message: "limit reached: 20 sandboxes exist"},
			[]string{"limit reached", "Kill sandboxes you no longer need"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.explain(context.Background(), tt.err, "").Error()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("explain = %q, want it to say %q", got, w)
				}
			}
			if tt.name == "daemon limit" && strings.Contains(got, "quota") {
				t.Errorf("the daemon's limit explained as a quota: %q", got)
			}
		})
	}
}
