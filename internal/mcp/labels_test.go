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

// spawn_sandboxes and branch_sandbox pass labels, user, env and cwd on;
// branch_sandbox takes forkd's diff and says the branch is incremental;
// write_file passes its user on.
func TestMetaTools(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	meta := map[string]any{"labels": map[string]string{"job": "7"}, "user": "user", "env": map[string]string{"CI": "1"}, "cwd": "/home/user"}
	check := func(tool string, labels, env map[string]string, user, cwd string) {
		t.Helper()
		if labels["job"] != "7" || env["CI"] != "1" || user != "user" || cwd != "/home/user" {
			t.Errorf("%s passed labels %v env %v user %q cwd %q", tool, labels, env, user, cwd)
		}
	}
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", meta, false))
	c := f.lastCreate
	check("create_sandbox", c.Labels, c.Env, c.User, c.Cwd)

	args := map[string]any{"sandbox_id": sb.ID, "diff": true}
	for k, v := range meta {
		args[k] = v
	}
	br := decode[branchOut](t, call(t, cs, "branch_sandbox", args, false))
	b := f.lastBranch
	check("branch_sandbox", b.Labels, b.Env, b.User, b.Cwd)
	if !br.Incremental {
		t.Error("branch_sandbox with diff did not say it is incremental")
	}
	if br := decode[branchOut](t, call(t, cs, "branch_sandbox", map[string]any{"sandbox_id": sb.ID}, false)); br.Incremental {
		t.Error("branch_sandbox without diff answered incremental")
	}

	args = map[string]any{"snapshot_tag": br.Snapshot.Tag}
	for k, v := range meta {
		args[k] = v
	}
	call(t, cs, "spawn_sandboxes", args, false)
	c = f.lastCreate
	check("spawn_sandboxes", c.Labels, c.Env, c.User, c.Cwd)

	call(t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "f", "content": "x", "user": "user"}, false)
	if f.lastPutUser != "user" {
		t.Errorf("write_file passed user %q, want user", f.lastPutUser)
	}
}
