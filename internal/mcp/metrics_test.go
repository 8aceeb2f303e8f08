package mcp

import (
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestGetSandboxMetrics(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{}, false))
	m := decode[apitype.SandboxMetrics](t, call(t, cs, "get_sandbox_metrics", map[string]any{"sandbox_id": sb.ID}, false))
	if m.ID != sb.ID || m.CPUSeconds != 1.5 || m.MemoryBytes != 1<<20 || !m.Cgroup {
		t.Errorf("get_sandbox_metrics = %+v", m)
	}
	call(t, cs, "get_sandbox_metrics", map[string]any{"sandbox_id": "sb-nope"}, true)
}
