package mcp

import (
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestPauseTools(t *testing.T) {
	_, cs := connect(t, newFake())
	made := decode[Sandbox](t, call(t, cs, "create_sandbox", nil, false))
	id := map[string]any{"sandbox_id": made.ID}
	if got := decode[Sandbox](t, call(t, cs, "pause_sandbox", id, false)); got.Status != apitype.StatusPaused {
		t.Fatalf("pause: %+v", got)
	}
	call(t, cs, "pause_sandbox", id, true) // paused already
	if got := decode[Sandbox](t, call(t, cs, "resume_sandbox", id, false)); got.Status != apitype.StatusRunning {
		t.Fatalf("resume: %+v", got)
	}
	// The session knows the token: no sandbox_token needed.
	c := decode[checkpointOut](t, call(t, cs, "checkpoint_sandbox", map[string]any{"sandbox_id": made.ID, "name": "c1"}, false))
	if c.Name != "c1" || c.SizeBytes == 0 {
		t.Fatalf("checkpoint: %+v", c)
	}
	if got := decode[Sandbox](t, call(t, cs, "rollback_sandbox", map[string]any{"sandbox_id": made.ID, "checkpoint": "c1"}, false)); got.ID != made.ID {
		t.Fatalf("rollback: %+v", got)
	}
	_, other := connect(t, newFake())
	call(t, other, "rollback_sandbox", map[string]any{"sandbox_id": made.ID, "checkpoint": "c1"}, true)
}
