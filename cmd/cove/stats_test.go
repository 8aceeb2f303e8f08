package main

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestPrintStats(t *testing.T) {
	tests := []struct {
		name string
		m    apitype.SandboxMetrics
		want []string
	}{
		{"running", apitype.SandboxMetrics{ID: "sb-1", Status: "running", Backend: "gvisor", Cgroup: true, CPUSeconds: 1.234,
			MemoryBytes: 20 << 20, MemoryPeakBytes: 24 << 20, MemoryLimitBytes: 512 << 20, DiskWrittenBytes: 4096, Pids: 27},
			[]string{"sb-1", "running (gvisor)", "1.23 s", "20 MiB (peak 24 MiB, limit 512 MiB)", "4.0 KiB", "27", "saved state"}},
		{"paused", apitype.SandboxMetrics{ID: "sb-2", Status: "paused", Backend: "qemu", DiskBytes: 3 << 30},
			[]string{"none: the sandbox is not running", "3.0 GiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := printStats(&b, tt.m); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}
