package mcp

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func (f *fakeAPI) Usage(_ context.Context, q client.UsageQuery) (apitype.Usage, error) {
	f.mu.Lock()
	u := f.usage
	f.mu.Unlock()
	if u == nil {
		return apitype.Usage{}, &client.Error{Status: http.StatusNotFound, Code: apitype.CodeNotFound, Message: "no route for GET /v1/usage"}
	}
	return u(q)
}

func TestGetUsageMetered(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	// A daemon that meters nothing: the rest of get_usage still answers.
	if out := decode[usageOut](t, call(t, cs, "get_usage", nil, false)); out.Metered != nil {
		t.Fatalf("metered from a daemon without a meter: %+v", out.Metered)
	}

	var asked client.UsageQuery
	f.mu.Lock()
	f.usage = func(q client.UsageQuery) (apitype.Usage, error) {
		asked = q
		switch {
		case q.From == "bad":
			return apitype.Usage{}, &client.Error{Status: http.StatusBadRequest, Code: apitype.CodeBadRequest, Message: `bad usage range: from "bad" is neither RFC 3339 nor unix seconds`}
		case q.Tenant == "globex":
			return apitype.Usage{}, &client.Error{Status: http.StatusNotFound, Code: apitype.CodeNotFound, Message: `tenant "globex" not found`}
		}
		return apitype.Usage{Tenant: "default", Totals: apitype.UsageFigures{SandboxSeconds: 12.5, VCPUSeconds: 25, Execs: 3},
			BySandbox: []apitype.SandboxUsage{{SandboxID: "sb-1", Template: "py", Running: true}}}, nil
	}
	f.mu.Unlock()
	out := decode[usageOut](t, call(t, cs, "get_usage", map[string]any{"from": "1773100800", "to": "2026-03-11T00:00:00Z"}, false))
	if out.Metered == nil || out.Metered.Totals.Execs != 3 || out.Metered.Totals.VCPUSeconds != 25 || len(out.Metered.BySandbox) != 1 {
		t.Fatalf("metered = %+v", out.Metered)
	}
	if asked != (client.UsageQuery{From: "1773100800", To: "2026-03-11T00:00:00Z"}) {
		t.Fatalf("asked %+v", asked)
	}
	for _, args := range []map[string]any{{"from": "bad"}, {"tenant": "globex"}} {
		if got := text(call(t, cs, "get_usage", args, true)); !strings.Contains(got, "bad usage range") && !strings.Contains(got, "globex") {
			t.Errorf("get_usage %v: %q, want the daemon's reason", args, got)
		}
	}
}
