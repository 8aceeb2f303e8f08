package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestRunEnv: a sandbox's env and cwd, set at create, apply to every exec
// (the exec's own env on top, its own cwd instead) and go to a branch's
// children; a cwd the sandbox lacks refuses the create, leaving nothing.
// Through the CLI, cove branch and cove spawn take labels, user, env and
// cwd of their own.
func TestRunEnv(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	sb := create(t, d, apitype.CreateSandboxRequest{Env: map[string]string{"COVE_A": "1", "COVE_B": "two words"}, Cwd: "/home/user"})[0]
	t.Cleanup(func() { d.c.DeleteSandbox(ctx, sb.id) })
	const show = `echo "$COVE_A|$COVE_B|$(pwd)"`
	if out := strings.TrimSpace(execOK(t, d, sb, show)); out != "1|two words|/home/user" {
		t.Errorf("exec sees %q", out)
	}
	res, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: show, Env: map[string]string{"COVE_B": "own"}, Cwd: "/tmp"})
	if err != nil || strings.TrimSpace(res.Stdout) != "1|own|/tmp" {
		t.Errorf("exec with its own env and cwd: %q %v", res.Stdout, err)
	}
	info, err := d.c.GetSandbox(ctx, sb.id)
	if err != nil || info.Env["COVE_A"] != "1" || info.Cwd != "/home/user" {
		t.Errorf("GET shows env %v cwd %q, %v", info.Env, info.Cwd, err)
	}

	before, _ := d.c.ListSandboxes(ctx)
	_, err = d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{Cwd: "/no/such/dir"})
	if err == nil || !strings.Contains(err.Error(), "cwd /no/such/dir does not exist") {
		t.Errorf("create with a missing cwd: %v", err)
	}
	if after, _ := d.c.ListSandboxes(ctx); len(after) != len(before) {
		t.Errorf("a refused create left a sandbox: %d, then %d", len(before), len(after))
	}

	home := t.TempDir()
	cliSb := strings.TrimSpace(coveCLI(t, d, home, "create", "-q", "--env", "COVE_A=cli", "--cwd", "/tmp", "--label", "team=a"))
	t.Cleanup(func() { d.c.DeleteSandbox(ctx, cliSb) })
	var br apitype.BranchResponse
	out := coveCLI(t, d, home, "branch", cliSb, "-n", "1", "--json", "--user", "user", "--label", "team=b", "--env", "COVE_B=kid")
	if err := json.Unmarshal([]byte(out), &br); err != nil || len(br.Children) != 1 {
		t.Fatalf("cove branch --json: %v\n%s", err, out)
	}
	kid := br.Children[0]
	t.Cleanup(func() { d.c.DeleteSandbox(ctx, kid.ID) })
	if kid.User != "user" || kid.Labels["team"] != "b" || kid.Cwd != "/tmp" || kid.Env["COVE_B"] != "kid" {
		t.Errorf("branch child: user %q labels %v env %v cwd %q", kid.User, kid.Labels, kid.Env, kid.Cwd)
	}
	if out := coveCLI(t, d, home, "exec", kid.ID, "--", "sh", "-c", `echo "$(whoami)|$COVE_B|$(pwd)"`); strings.TrimSpace(out) != "user|kid|/tmp" {
		t.Errorf("exec in the branch child: %q", out)
	}
	ids := strings.Fields(coveCLI(t, d, home, "spawn", br.Tag, "-q", "--label", "team=c", "--user", "root"))
	for _, id := range ids {
		t.Cleanup(func() { d.c.DeleteSandbox(ctx, id) })
	}
	if len(ids) != 1 {
		t.Fatalf("cove spawn -q printed %q", ids)
	}
	if got, err := d.c.GetSandbox(ctx, ids[0]); err != nil || got.Labels["team"] != "c" || got.User != "" || got.Env["COVE_B"] != "kid" {
		t.Errorf("spawned: %+v, %v", got, err)
	}
}
