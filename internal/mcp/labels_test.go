package mcp

import "testing"

// exec_command passes its user on.
func TestExecUser(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{"user": "user"}, false))
	call(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "command": "whoami", "user": "root"}, false)
	if got := f.lastExec().User; got != "root" {
		t.Errorf("exec's user %q, want root", got)
	}
}

// create_sandbox passes labels on, and list_sandboxes shows and filters by them.
func TestLabelsTools(t *testing.T) {
	_, cs := connect(t, newFake())
	a := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{"labels": map[string]string{"team": "a"}}, false))
	call(t, cs, "create_sandbox", map[string]any{"labels": map[string]string{"team": "b"}}, false)
	if a.Labels["team"] != "a" {
		t.Errorf("created with labels %v", a.Labels)
	}
	for _, tt := range []struct {
		args map[string]any
		want int
	}{
		{map[string]any{}, 2},
		{map[string]any{"labels": map[string]string{"team": "a"}}, 1},
		{map[string]any{"labels": map[string]string{"team": "c"}}, 0},
	} {
		out := decode[sandboxesOut](t, call(t, cs, "list_sandboxes", tt.args, false))
		if len(out.Sandboxes) != tt.want {
			t.Errorf("list_sandboxes %v: %d sandboxes, want %d", tt.args, len(out.Sandboxes), tt.want)
		}
	}
}
