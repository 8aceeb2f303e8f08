package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// tenantKey makes a key of a new tenant on d with the daemon's admin key
// (quota is the request's JSON quota fields, "" for none) and returns the
// tenant's name and a client that uses the key.
func tenantKey(t *testing.T, d *daemon, prefix, quota string) (string, *client.Client) {
	t.Helper()
	name := prefix + "-" + randomHex(3)
	body := fmt.Sprintf(`{"name":%q,"tenant":%q%s}`, name, name, quota)
	code, b := rawCall(t, "POST", d.url+"/v1/keys", map[string]string{"Authorization": "Bearer " + d.key}, body)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/keys %s: %d %s", body, code, b)
	}
	var k apitype.CreateKeyResponse
	if err := json.Unmarshal(b, &k); err != nil || k.Key == "" {
		t.Fatalf("POST /v1/keys: %s, %v", b, err)
	}
	t.Cleanup(func() {
		rawCall(t, "DELETE", d.url+"/v1/keys/"+k.ID, map[string]string{"Authorization": "Bearer " + d.key}, "")
	})
	return name, client.New(d.url, k.Key)
}

// killAll deletes every sandbox c sees, at the end of a test.
func killAll(t *testing.T, c *client.Client) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := c.ListSandboxes(ctx)
		for _, sb := range list {
			c.DeleteSandbox(ctx, sb.ID)
		}
	})
}

// TestTenantIsolation: with tenant A's key nothing of tenant B's can be
// listed, read, run, copied, exposed, killed or spawned from: each call
// answers 404, as for an id that names nothing, and B's things are
// unchanged after.
func TestTenantIsolation(t *testing.T) {
	apiLayer(t)
	d := suite.shared
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, a := tenantKey(t, d, "e2e-ta", "")
	_, b := tenantKey(t, d, "e2e-tb", "")
	killAll(t, a)
	killAll(t, b)

	infos, err := b.CreateSandboxes(ctx, apitype.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("B's create: %v\n%s", err, d.logTail())
	}
	bsb := infos[0]
	tag := "e2e-tb-snap-" + randomHex(3)
	if _, err := b.Branch(ctx, bsb.ID, bsb.Token, apitype.BranchRequest{Tag: tag}); err != nil {
		t.Fatalf("B's branch: %v", err)
	}
	t.Cleanup(func() { b.DeleteSnapshot(context.Background(), tag) })
	tmpl := "e2e-tb-tmpl-" + randomHex(3)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM cove:default\nRUN echo b > /tmp/b.txt\n"})
	none := 0
	if _, err := b.BuildTemplate(ctx, client.TemplateBuild{Name: tmpl, Context: contextTar(t, dir), PoolSize: &none}, nil); err != nil {
		t.Fatalf("B's template: %v\n%s", err, d.logTail())
	}
	t.Cleanup(func() { b.DeleteTemplate(context.Background(), tmpl) })

	// A knows B's ids and even B's sandbox token: still nothing.
	id, tok := bsb.ID, bsb.Token
	tests := []struct {
		name string
		call func() error
	}{
		{"get", func() error { _, err := a.GetSandbox(ctx, id); return err }},
		{"exec", func() error {
			_, err := a.Exec(ctx, id, tok, apitype.ExecRequest{Shell: "echo pwned > /tmp/p"})
			return err
		}},
		{"read file", func() error {
			rc, _, err := a.GetFile(ctx, id, tok, "/etc/hostname")
			if err == nil {
				io.Copy(io.Discard, rc)
				rc.Close()
			}
			return err
		}},
		{"branch", func() error { _, err := a.Branch(ctx, id, tok, apitype.BranchRequest{N: 1}); return err }},
		{"snapshot", func() error { _, err := a.SnapshotSandbox(ctx, id, tok, apitype.BranchRequest{}); return err }},
		{"expose", func() error { _, err := a.ExposePort(ctx, id, tok, 8080, true); return err }},
		{"kill", func() error { return a.DeleteSandbox(ctx, id) }},
		{"get snapshot", func() error { _, err := a.GetSnapshot(ctx, tag); return err }},
		{"spawn from snapshot", func() error {
			_, err := a.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag, SandboxToken: tok})
			return err
		}},
		{"delete snapshot", func() error { return a.DeleteSnapshot(ctx, tag) }},
		{"get template", func() error { _, err := a.GetTemplate(ctx, tmpl); return err }},
		{"spawn from template", func() error {
			_, err := a.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tmpl})
			return err
		}},
		{"delete template", func() error { return a.DeleteTemplate(ctx, tmpl) }},
	}
	_, unknown := a.GetSandbox(ctx, "sb-000000000000")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != http.StatusNotFound || ce.Code != apitype.CodeNotFound {
				t.Fatalf("A's %s of B's: %v, want 404 not_found", tt.name, err)
			}
		})
	}
	// The same words as for an id that names nothing.
	_, err = a.GetSandbox(ctx, id)
	if err == nil || err.Error() != strings.Replace(unknown.Error(), "sb-000000000000", id, 1) {
		t.Errorf("B's sandbox to A: %v; an unknown one: %v", err, unknown)
	}
	// Lists leave B's out.
	if list, err := a.ListSandboxes(ctx); err != nil || len(list) != 0 {
		t.Errorf("A lists sandboxes %+v, %v; want none", list, err)
	}
	if list, err := a.ListSnapshots(ctx); err != nil || containsTag(list, tag) || containsTag(list, tmpl) {
		t.Errorf("A lists B's snapshots: %+v, %v", list, err)
	}
	if list, err := a.ListTemplates(ctx); err != nil || len(list) != 0 {
		t.Errorf("A lists templates %+v, %v; want none", list, err)
	}
	// B's sandbox is untouched: A's exec did not run, A's kill did not kill.
	if got, err := b.GetSandbox(ctx, id); err != nil || got.Status != apitype.StatusRunning {
		t.Fatalf("B's sandbox after A's calls: %+v, %v", got, err)
	}
	res, err := b.Exec(ctx, id, tok, apitype.ExecRequest{Shell: "test -e /tmp/p && echo pwned || echo clean"})
	if err != nil || res.Stdout != "clean\n" {
		t.Errorf("B's sandbox after A's exec: %+v, %v", res, err)
	}
	if list, err := b.ListSnapshots(ctx); err != nil || !containsTag(list, tag) {
		t.Errorf("B's snapshots after A's calls: %+v, %v", list, err)
	}
	// B spawns from its own template; A's list is still empty.
	if _, err := b.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tmpl}); err != nil {
		t.Errorf("B's spawn from its template: %v", err)
	}
}

func containsTag(list []apitype.SnapshotInfo, tag string) bool {
	for _, s := range list {
		if s.Tag == tag {
			return true
		}
	}
	return false
}

// quotaRefused wants err to be a 429 quota_exceeded whose message names
// the quota as want does.
func quotaRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Code != apitype.CodeQuota || !strings.Contains(ce.Message, want) {
		t.Errorf("%s: %v; want 429 %s naming %q", what, err, apitype.CodeQuota, want)
	}
}

// TestTenantQuotas: each quota refuses with 429 and a message naming it
// and its value; a refused spawn of 50 leaves nothing, neither listed nor
// among the backend's processes.
func TestTenantQuotas(t *testing.T) {
	apiLayer(t)
	d := suite.shared
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name, c := tenantKey(t, d, "e2e-tq", `,"max_sandboxes":2,"max_spawn_n":10,"max_ttl_secs":600,"max_memory_mib":1024`)
	killAll(t, c)
	procs := len(backendProcs(d.stateDir()))
	all, err := d.c.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 50})
	quotaRefused(t, "spawn of 50", err, fmt.Sprintf("quota max_spawn_n=10 of tenant %s: this asks for 50", name))
	// With no max_spawn_n, the same 50 meet max_sandboxes, all or nothing.
	wide, cw := tenantKey(t, d, "e2e-tw", `,"max_sandboxes":3`)
	killAll(t, cw)
	_, err = cw.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 50})
	quotaRefused(t, "spawn of 50 past max_sandboxes", err, fmt.Sprintf("quota max_sandboxes=3 of tenant %s: it holds 0, this asks for 50", wide))
	if list, err := cw.ListSandboxes(ctx); err != nil || len(list) != 0 {
		t.Errorf("after a refused spawn of 50 the tenant lists %+v, %v", list, err)
	}
	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{TTLSecs: 3600})
	quotaRefused(t, "ttl 3600", err, fmt.Sprintf("quota max_ttl_secs=600 of tenant %s", name))
	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 3})
	quotaRefused(t, "create of 3", err, fmt.Sprintf("quota max_sandboxes=2 of tenant %s: it holds 0, this asks for 3", name))
	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{MemoryMiB: 2048})
	quotaRefused(t, "2048 MiB", err, fmt.Sprintf("quota max_memory_mib=1024 of tenant %s", name))

	// Nothing of the refused calls exists: not listed (the tenant's, or
	// anyone's), no backend process.
	if list, err := c.ListSandboxes(ctx); err != nil || len(list) != 0 {
		t.Errorf("after refusals the tenant lists %+v, %v", list, err)
	}
	if now, err := d.c.ListSandboxes(ctx); err != nil || len(now) != len(all) {
		t.Errorf("after refusals the daemon lists %d sandboxes, %v; want %d", len(now), err, len(all))
	}
	if n := len(backendProcs(d.stateDir())); n > procs {
		t.Errorf("after refusals %d backend processes, before %d", n, procs)
	}

	// At the quota: two fit, the third is refused, and one killed makes room.
	sbs, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 2})
	if err != nil {
		t.Fatalf("create of 2 within the quota: %v", err)
	}
	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{})
	quotaRefused(t, "a third", err, fmt.Sprintf("quota max_sandboxes=2 of tenant %s: it holds 2, this asks for 1", name))
	_, err = c.Branch(ctx, sbs[0].ID, sbs[0].Token, apitype.BranchRequest{N: 1})
	quotaRefused(t, "a branch child", err, fmt.Sprintf("quota max_sandboxes=2 of tenant %s", name))
	_, err = c.Extend(ctx, sbs[0].ID, 3600)
	quotaRefused(t, "extend to 3600", err, fmt.Sprintf("quota max_ttl_secs=600 of tenant %s", name))
	if err := c.DeleteSandbox(ctx, sbs[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{}); err != nil {
		t.Errorf("a create after a kill made room: %v", err)
	}
	// GET /v1/usage shows the quota and what the tenant holds.
	u, err := c.Usage(ctx, client.UsageQuery{})
	if err != nil || u.Tenant != name || u.Quota.MaxSandboxes != 2 || u.InUse.Sandboxes != 2 || u.InUse.DiskMiB == nil {
		t.Errorf("usage %+v, %v; want the quota, 2 sandboxes in use and the disk", u, err)
	}
}

// TestTenantQuotaHostile: a tenant at max_sandboxes and max_memory_mib
// whose sandboxes hog memory and fork-bomb cannot take more, nor take the
// host down: a neighbour of another tenant answers throughout, the
// sandboxes' host tasks stay bounded, and the daemon is healthy after.
func TestTenantQuotaHostile(t *testing.T) {
	d := suite.shared
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const pids, mem = 128, 256
	name, c := tenantKey(t, d, "e2e-th", fmt.Sprintf(`,"max_sandboxes":2,"max_memory_mib":%d`, 2*mem))
	killAll(t, c)
	neighbour := newSandbox(t)
	watch := watchNeighbour(t, d, neighbour)

	sbs, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 2, MemoryMiB: mem, Pids: pids})
	if err != nil {
		t.Fatalf("create at the quota: %v\n%s", err, d.logTail())
	}
	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{MemoryMiB: 64})
	quotaRefused(t, "a third at the quota", err, fmt.Sprintf("quota max_sandboxes=2 of tenant %s", name))

	hog, bomb := sandbox{sbs[0].ID, sbs[0].Token}, sandbox{sbs[1].ID, sbs[1].Token}
	hogDone := make(chan error, 1)
	go func() {
		// Four times its memory, touched page by page.
		_, err := c.Exec(ctx, hog.id, hog.token, apitype.ExecRequest{Args: []string{"python3", "-c",
			fmt.Sprintf("b = bytearray(%d << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('allocated')", 4*mem)}, TimeoutSecs: 120})
		hogDone <- err
	}()
	res, peak, err := forkBomb(ctx, d, bomb, `import subprocess, time
ps, fails = [], 0
for i in range(3000):
    try:
        ps.append(subprocess.Popen(["sleep", "600"]))
    except OSError:
        fails += 1
        if fails == 50:
            break
time.sleep(2)
for p in ps:
    p.kill()
print(len(ps), fails)`)
	t.Logf("fork bomb in a sandbox of pids %d: %q %v; its host tasks peaked at %d", pids, strings.TrimSpace(res.Stdout), err, peak)
	if peak > hostTaskFloor(pids) {
		t.Errorf("the bomb's host tasks peaked at %d, want at most %d", peak, hostTaskFloor(pids))
	}
	select {
	case err := <-hogDone:
		t.Logf("memory hog of %d MiB in %d: %v", 4*mem, mem, err)
	case <-ctx.Done():
		t.Fatal("the memory hog's exec did not end")
	}
	// Whatever became of the tenant's sandboxes (a hog may be killed),
	// the quota still holds and the host is fine.
	_, err = c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{MemoryMiB: 2 * mem})
	var ce *client.Error
	if err == nil || !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests {
		t.Errorf("a create past the memory quota after the hog: %v, want 429", err)
	}
	watch.check(t)
	if code, _ := rawCall(t, "GET", d.url+"/healthz", nil, ""); code != http.StatusOK {
		t.Errorf("healthz after the hostile tenant: %d", code)
	}
	if out := execOK(t, d, neighbour, "echo ok"); out != "ok\n" {
		t.Errorf("the neighbour after: %q", out)
	}
}
