package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestUsageMetered meters a real sandbox through execs, a pause and a
// daemon SIGKILL: the execs are counted exactly, the seconds lie within
// the wall time the test measured less the paused part, the figures
// survive the kill, and a sandbox that kept running across it keeps
// accruing. MCP's get_usage shows the same totals.
func TestUsageMetered(t *testing.T) {
	d, err := startDaemon(filepath.Join(suite.tmp, "usage"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	ctx := context.Background()
	from := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)

	start := time.Now()
	sb := create(t, d, apitype.CreateSandboxRequest{})[0]
	const execs = 5
	for range execs {
		execOK(t, d, sb, "true")
	}
	if _, err := d.c.PauseSandbox(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	time.Sleep(2 * time.Second)
	resumedAt := time.Now()
	if _, err := d.c.ResumeSandbox(ctx, sb.id, 0); err != nil {
		t.Fatal(err)
	}
	execOK(t, d, sb, "true") // the resumed sandbox answers
	time.Sleep(time.Second)

	q := client.UsageQuery{From: from}
	u := usageOf(t, d, q, sb.id)
	wall := time.Since(start).Seconds()
	paused := resumedAt.Sub(pausedAt).Seconds()
	row := u.BySandbox[0]
	if row.SandboxSeconds <= 0 || row.SandboxSeconds > wall-paused+1 {
		t.Errorf("sandbox_seconds %.2f, want in (0, %.2f]: the %.1f s paused must not count", row.SandboxSeconds, wall-paused+1, paused)
	}
	if row.Execs < execs+1 {
		t.Errorf("execs %d, want at least %d", row.Execs, execs+1)
	}
	if row.VCPUSeconds < row.SandboxSeconds || row.GiBSeconds <= 0 {
		t.Errorf("vcpu_seconds %.2f / gib_seconds %.2f for %.2f sandbox seconds", row.VCPUSeconds, row.GiBSeconds, row.SandboxSeconds)
	}
	if !row.Running || row.Template == "" {
		t.Errorf("by_sandbox row %+v, want running and a template", row)
	}
	if len(u.ByTemplate) == 0 || u.ByTemplate[0].Template != row.Template {
		t.Errorf("by_template %+v, want a row of template %q", u.ByTemplate, row.Template)
	}
	if u.Tenant != "default" || u.InUse.Sandboxes < 1 {
		t.Errorf("tenant %q, in_use %+v", u.Tenant, u.InUse)
	}

	// The execs before the pause were written at the pause: a SIGKILL
	// loses none of them, nor any time.
	d.kill9()
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	after := usageOf(t, d, q, sb.id).BySandbox[0]
	if after.Execs < execs {
		t.Errorf("after a SIGKILL: execs %d, want at least the %d written at the pause", after.Execs, execs)
	}
	if after.SandboxSeconds < row.SandboxSeconds {
		t.Errorf("after a SIGKILL: sandbox_seconds fell from %.2f to %.2f", row.SandboxSeconds, after.SandboxSeconds)
	}
	// Under gVisor the agent's connection (the execs' output) runs over
	// the sandbox's link, so the pause's flush wrote bytes both ways.
	if backend() == "gvisor" && (after.BytesIn <= 0 || after.BytesOut <= 0) {
		t.Errorf("after a SIGKILL: bytes_in %d, bytes_out %d, want both > 0 from the execs' traffic", after.BytesIn, after.BytesOut)
	}
	if !after.Running {
		t.Errorf("after a SIGKILL the sandbox that kept running is metered as stopped: %+v", after)
	}
	time.Sleep(time.Second)
	later := usageOf(t, d, q, sb.id).BySandbox[0]
	if later.SandboxSeconds <= after.SandboxSeconds {
		t.Errorf("a sandbox running across the restart stopped accruing: %.2f then %.2f", after.SandboxSeconds, later.SandboxSeconds)
	}

	// Deleted, it stops accruing and its use stays.
	if err := d.c.DeleteSandbox(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	gone := usageOf(t, d, q, sb.id)
	if gone.BySandbox[0].Running {
		t.Errorf("a deleted sandbox is metered as running: %+v", gone.BySandbox[0])
	}
	time.Sleep(time.Second)
	final := usageOf(t, d, q, sb.id)
	if final.Totals.SandboxSeconds != gone.Totals.SandboxSeconds {
		t.Errorf("sandbox_seconds grew after the delete: %.3f then %.3f", gone.Totals.SandboxSeconds, final.Totals.SandboxSeconds)
	}

	var viaMCP struct {
		Metered apitype.Usage `json:"metered"`
	}
	cs := connectMCP(t, httpTransport(d.url, d.key))
	callOK(t, cs, "get_usage", map[string]any{"from": from}, &viaMCP)
	if viaMCP.Metered.Totals != final.Totals {
		t.Errorf("MCP get_usage totals %+v, /v1/usage %+v", viaMCP.Metered.Totals, final.Totals)
	}
}

// usageOf reads /v1/usage and keeps only sandbox id's row, which it
// requires.
func usageOf(t *testing.T, d *daemon, q client.UsageQuery, id string) apitype.Usage {
	t.Helper()
	u, err := d.c.Usage(context.Background(), q)
	if err != nil {
		t.Fatalf("usage: %v", err)
	}
	var rows []apitype.SandboxUsage
	for _, r := range u.BySandbox {
		if r.SandboxID == id {
			rows = append(rows, r)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("usage has %d rows for %s: %+v", len(rows), id, u.BySandbox)
	}
	u.BySandbox = rows
	return u
}
