package api

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/sandbox"
)

func TestTemplateOptions(t *testing.T) {
	for _, tc := range []struct {
		query, wantErr string
	}{
		{query: "name=web&build_arg=A=1&build_arg=B=x%3Dy&start=s&ready=r&cpus=2&pool_size=0&network=%7B%22allow_cidrs%22%3A%5B%2210.0.0.1%2F32%22%5D%7D"},
		{query: "build_arg=A=1", wantErr: "name is required"},
		{query: "name=a&build_arg=novalue", wantErr: "want KEY=VALUE"},
		{query: "name=a&cpus=two", wantErr: "cpus"},
		{query: "name=a&network=%7B", wantErr: "network"},
	} {
		r := httptest.NewRequest("POST", "/v1/templates?"+tc.query, nil)
		o, df, err := templateOptions(r)
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want ErrInvalid with %q", tc.query, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		if o.Name != "web" || df != "Dockerfile" || o.BuildArgs["A"] != "1" || o.BuildArgs["B"] != "x=y" || o.Start != "s" || o.Ready != "r" ||
			o.CPUs != 2 || o.PoolSize != 0 || o.Network == nil || len(o.Network.AllowCIDRs) != 1 {
			t.Errorf("%s: %+v", tc.query, o)
		}
	}
	r := httptest.NewRequest("POST", "/v1/templates?name=a", nil)
	if o, _, _ := templateOptions(r); o.PoolSize != -1 || o.Network != nil {
		t.Errorf("defaults: %+v, want the daemon's pool and no policy", o)
	}
}
