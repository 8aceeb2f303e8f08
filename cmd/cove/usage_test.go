package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestPrintUsage(t *testing.T) {
	left, disk := 3, int64(100)
	u := apitype.Usage{
		Tenant: "acme", From: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		Totals:     apitype.UsageFigures{SandboxSeconds: 90, VCPUSeconds: 180, GiBSeconds: 45, BytesIn: 2048, BytesOut: 10, Execs: 7},
		ByTemplate: []apitype.TemplateUsage{{Template: "py", UsageFigures: apitype.UsageFigures{SandboxSeconds: 90, Execs: 7}}},
		BySandbox:  []apitype.SandboxUsage{{SandboxID: "sb-1", Template: "py", Running: true, UsageFigures: apitype.UsageFigures{Execs: 7}}},
		Quota:      apitype.UsageQuota{MaxSandboxes: 5},
		InUse:      apitype.UsageInUse{Sandboxes: 2, VCPUs: 4, MemoryMiB: 1024, DiskMiB: &disk},
		Remaining:  apitype.UsageRemaining{Sandboxes: &left},
	}
	var b strings.Builder
	if err := printUsage(&b, u); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"acme", "2026-03-01T00:00:00Z to 2026-03-02T00:00:00Z", "SANDBOX-S", "sb-1 (running)",
		"180.0", "2.0 KiB", "sandboxes   5", "unlimited", "disk_mib    unlimited  100"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
