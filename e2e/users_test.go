package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestUsers: the image's unprivileged account, through exec, PUT files and
// a sandbox's default user.
func TestUsers(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	sb := newSandbox(t)
	run := func(user, shell string) apitype.ExecResponse {
		t.Helper()
		res, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: shell, User: user, TimeoutSecs: 60})
		if err != nil {
			t.Fatalf("exec %q as %q: %v", shell, user, err)
		}
		return res
	}
	if out := run("user", `echo "$(whoami) $(id -u) $HOME"; touch /work/by-exec`).Stdout; strings.TrimSpace(out) != "user 1000 /home/user" {
		t.Errorf("as user: %q", out)
	}
	if _, err := d.c.PutFileAs(ctx, sb.id, sb.token, "/home/user/new/by-put", 0o644, "user", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if out := execOK(t, d, sb, "stat -c %u:%g /work/by-exec /home/user/new/by-put /home/user/new /home/user"); out != strings.Repeat("1000:1000\n", 4) {
		t.Errorf("owners %q, want 1000:1000 each", out)
	}
	if res := run("user", "sudo -n true && sudo -n id -u"); res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "0" {
		t.Errorf("sudo -n as user: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	code, body := rawCall(t, "POST", d.url+"/v1/sandboxes/"+sb.id+"/exec",
		map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: sb.token}, `{"shell":"true","user":"nobody-here"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "no user nobody-here in the sandbox") {
		t.Errorf("exec as nobody-here: %d %s", code, body)
	}

	// A default user at create: exec runs as it unless the call says root.
	def := create(t, d, apitype.CreateSandboxRequest{User: "user"})[0]
	defer d.c.DeleteSandbox(ctx, def.id)
	if out := execOK(t, d, def, "id -un"); strings.TrimSpace(out) != "user" {
		t.Errorf("default user: %q", out)
	}
	res, err := d.c.Exec(ctx, def.id, def.token, apitype.ExecRequest{Shell: "id -un", User: "root"})
	if err != nil || strings.TrimSpace(res.Stdout) != "root" {
		t.Errorf("as root in a sandbox of user: %q %v", res.Stdout, err)
	}
	before, _ := d.c.ListSandboxes(ctx)
	if _, err := d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{User: "nobody-here"}); err == nil || !strings.Contains(err.Error(), "no user nobody-here") {
		t.Errorf("create with user nobody-here: %v", err)
	}
	if after, _ := d.c.ListSandboxes(ctx); len(after) != len(before) {
		t.Errorf("a refused create left a sandbox: %d, then %d", len(before), len(after))
	}
}

// TestLabels: labels at create, filtered lists, a branch's child inherits
// them, and bad ones are refused.
func TestLabels(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	run := "e2e-" + randomHex(4)
	a := create(t, d, apitype.CreateSandboxRequest{Labels: map[string]string{"run": run, "role": "a"}})[0]
	defer d.c.DeleteSandbox(ctx, a.id)
	b := create(t, d, apitype.CreateSandboxRequest{Labels: map[string]string{"run": run, "role": "b"}})[0]
	defer d.c.DeleteSandbox(ctx, b.id)
	ids := func(filter map[string]string) []string {
		t.Helper()
		list, err := d.c.ListSandboxesLabeled(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sb := range list {
			out = append(out, sb.ID)
		}
		return out
	}
	if got := ids(map[string]string{"run": run}); len(got) != 2 {
		t.Errorf("run=%s lists %v, want %s and %s", run, got, a.id, b.id)
	}
	if got := ids(map[string]string{"run": run, "role": "b"}); len(got) != 1 || got[0] != b.id {
		t.Errorf("run and role=b list %v, want %s", got, b.id)
	}
	br, err := d.c.Branch(ctx, a.id, a.token, apitype.BranchRequest{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.DeleteSnapshot(ctx, br.Tag)
	child := br.Children[0]
	defer d.c.DeleteSandbox(ctx, child.ID)
	if child.Labels["run"] != run || child.Labels["role"] != "a" {
		t.Errorf("the branch's child has labels %v", child.Labels)
	}
	if got := ids(map[string]string{"run": run, "role": "a"}); len(got) != 2 {
		t.Errorf("role=a lists %v, want the source and its child", got)
	}
	for _, body := range []string{`{"labels":{"Bad":"x"}}`, `{"labels":{"k":"` + strings.Repeat("v", 257) + `"}}`} {
		code, out := rawCall(t, "POST", d.url+"/v1/sandboxes", map[string]string{"Authorization": "Bearer " + d.key}, body)
		if code != http.StatusBadRequest {
			t.Errorf("create %.40s: %d %s", body, code, out)
		}
	}
	if code, out := rawCall(t, "GET", d.url+"/v1/sandboxes?label=run", map[string]string{"Authorization": "Bearer " + d.key}, ""); code != http.StatusBadRequest {
		t.Errorf("a malformed filter: %d %s", code, out)
	}
}
