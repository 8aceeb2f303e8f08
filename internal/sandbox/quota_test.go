package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/tenant"
)

// as is ctx acting for a key of tenant t held to limits l.
func as(ctx context.Context, t string, l tenant.Limits) context.Context {
	return tenant.NewContext(ctx, tenant.Principal{KeyID: "key-" + t, Tenant: t, Limits: l})
}

// footprint is what exists: store rows, runtime sandboxes and starts,
// snapshots, as a refused call must leave it.
type footprint struct {
	rows, ids             []string
	starts, restores, cps int
	snapshots             []string
}

func (e *testEnv) footprint(t *testing.T) footprint {
	t.Helper()
	var tags []string
	for _, sn := range e.svc.Snapshots(context.Background()) {
		tags = append(tags, sn.Tag)
	}
	ids := e.rt.IDs()
	slices.Sort(ids)
	return footprint{rows: e.rows(t), ids: ids, starts: e.rt.Starts(), restores: e.rt.Restores(),
		cps: len(e.rt.Checkpoints()), snapshots: tags}
}

func (f footprint) equal(g footprint) bool {
	return slices.Equal(f.rows, g.rows) && slices.Equal(f.ids, g.ids) && f.starts == g.starts &&
		f.restores == g.restores && f.cps == g.cps && slices.Equal(f.snapshots, g.snapshots)
}

// TestQuotaRefuses: each quota refuses the call that would pass it with
// ErrQuota and a message naming the quota, its value and the tenant, and
// the refused call makes nothing.
func TestQuotaRefuses(t *testing.T) {
	tests := []struct {
		name   string
		limits tenant.Limits
		// prepare runs with the limits in force, before the refused call.
		prepare func(t *testing.T, s setup)
		call    func(s setup) error
		want    string
	}{
		{"max_sandboxes: create n", tenant.Limits{MaxSandboxes: 2}, nil,
			func(s setup) error { _, err := s.e.svc.Create(s.ctx, CreateOptions{N: 2}); return err },
			"quota max_sandboxes=2 of tenant acme: it holds 1, this asks for 2; kill some or ask an admin for a larger quota"},
		{"max_sandboxes: branch children", tenant.Limits{MaxSandboxes: 2}, nil,
			func(s setup) error {
				_, err := s.e.open(s.t, s.sb.ID, s.sb.Token).Branch(s.ctx, BranchOptions{Tag: "b", N: 2})
				return err
			},
			"quota max_sandboxes=2 of tenant acme: it holds 1, this asks for 2"},
		{"max_spawn_n", tenant.Limits{MaxSpawnN: 3}, nil,
			func(s setup) error { _, err := s.e.svc.Create(s.ctx, CreateOptions{N: 4}); return err },
			"quota max_spawn_n=3 of tenant acme: this asks for 4 sandboxes in one call"},
		{"max_spawn_n: branch", tenant.Limits{MaxSpawnN: 3}, nil,
			func(s setup) error {
				_, err := s.e.open(s.t, s.sb.ID, s.sb.Token).Branch(s.ctx, BranchOptions{Tag: "b", N: 4})
				return err
			},
			"quota max_spawn_n=3 of tenant acme"},
		{"max_vcpus", tenant.Limits{MaxVCPUs: 2}, nil,
			func(s setup) error { _, err := s.e.svc.Create(s.ctx, CreateOptions{CPUs: 2}); return err },
			"quota max_vcpus=2 of tenant acme: its sandboxes hold 1, this asks for 2 more"},
		{"max_memory_mib", tenant.Limits{MaxMemoryMiB: 512}, nil,
			func(s setup) error { _, err := s.e.svc.Create(s.ctx, CreateOptions{N: 2}); return err },
			"quota max_memory_mib=512 of tenant acme: its sandboxes hold 256 MiB, this asks for 512 MiB more"},
		{"max_ttl_secs: create", tenant.Limits{MaxTTLSecs: 60}, nil,
			func(s setup) error { _, err := s.e.svc.Create(s.ctx, CreateOptions{TTL: 2 * time.Minute}); return err },
			"quota max_ttl_secs=60 of tenant acme: this asks for ttl_secs 120"},
		{"max_ttl_secs: extend", tenant.Limits{MaxTTLSecs: 60}, nil,
			func(s setup) error { _, err := s.e.svc.Extend(s.ctx, s.sb.ID, 2*time.Minute); return err },
			"quota max_ttl_secs=60 of tenant acme: this asks for ttl_secs 120"},
		{"max_ttl_secs: branch children", tenant.Limits{MaxTTLSecs: 60}, nil,
			func(s setup) error {
				_, err := s.e.open(s.t, s.sb.ID, s.sb.Token).Branch(s.ctx, BranchOptions{Tag: "b", N: 1, TTL: time.Hour})
				return err
			},
			"quota max_ttl_secs=60 of tenant acme"},
		{"max_sandboxes: resume", tenant.Limits{MaxSandboxes: 1},
			func(t *testing.T, s setup) {
				if _, err := s.e.svc.Pause(s.ctx, s.sb.ID); err != nil {
					t.Fatal(err)
				}
				if _, err := s.e.svc.Create(s.ctx, CreateOptions{}); err != nil {
					t.Fatalf("a paused sandbox held a place: %v", err)
				}
			},
			func(s setup) error { _, err := s.e.svc.Resume(s.ctx, s.sb.ID, 0); return err },
			"quota max_sandboxes=1 of tenant acme: it holds 1, this asks for 1"},
		{"max_disk_mib: branch", tenant.Limits{MaxDiskMiB: 1}, fillDisk,
			func(s setup) error {
				_, err := s.e.open(s.t, s.sb.ID, s.sb.Token).Branch(s.ctx, BranchOptions{Tag: "b"})
				return err
			},
			"quota max_disk_mib=1 of tenant acme: its snapshots, templates, checkpoints and paused sandboxes take 2 MiB, so snapshot \"b\" cannot be saved"},
		{"max_disk_mib: checkpoint", tenant.Limits{MaxDiskMiB: 1}, fillDisk,
			func(s setup) error {
				_, err := s.e.open(s.t, s.sb.ID, s.sb.Token).Checkpoint(s.ctx, "c1")
				return err
			},
			"quota max_disk_mib=1 of tenant acme: its snapshots, templates, checkpoints and paused sandboxes take 2 MiB, so checkpoint \"c1\" cannot be saved"},
		{"max_disk_mib: pause", tenant.Limits{MaxDiskMiB: 1}, fillDisk,
			func(s setup) error { _, err := s.e.svc.Pause(s.ctx, s.sb.ID); return err },
			"quota max_disk_mib=1 of tenant acme"},
		{"max_disk_mib: build", tenant.Limits{MaxDiskMiB: 1}, fillDisk,
			func(s setup) error {
				_, err := s.e.svc.BuildSnapshot(s.ctx, BuildOptions{Tag: "built", Warm: "true"})
				return err
			},
			"quota max_disk_mib=1 of tenant acme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			free := as(testCtx(t), "acme", tenant.Limits{})
			infos, err := e.svc.Create(free, CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := setup{t: t, e: e, ctx: as(testCtx(t), "acme", tt.limits), sb: infos[0]}
			if tt.prepare != nil {
				tt.prepare(t, s)
			}
			before := e.footprint(t)
			err = tt.call(s)
			if !errors.Is(err, ErrQuota) {
				t.Fatalf("error = %v, want ErrQuota", err)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("message = %q, want it to start %q", err, tt.want)
			}
			if after := e.footprint(t); !after.equal(before) {
				t.Errorf("a refused call made something: before %+v, after %+v", before, after)
			}
			// Without limits the same tenant may go on: the refusal held nothing.
			if _, err := e.svc.Create(free, CreateOptions{}); err != nil {
				t.Errorf("create after the refusal: %v", err)
			}
		})
	}
}

// fillDisk gives acme a snapshot of 2 MiB (as recorded, which is what the
// disk quota sums).
func fillDisk(t *testing.T, s setup) {
	t.Helper()
	if _, err := s.e.open(t, s.sb.ID, s.sb.Token).Branch(as(testCtx(t), "acme", tenant.Limits{}), BranchOptions{Tag: "full"}); err != nil {
		t.Fatal(err)
	}
	s.e.svc.mu.Lock()
	s.e.svc.snapshots["full"].rec.SizeBytes = 2 << 20
	s.e.svc.mu.Unlock()
}

// setup is what a case of TestQuotaRefuses works on.
type setup struct {
	t   *testing.T
	e   *testEnv
	ctx context.Context // acme's, held to the case's limits
	sb  Info            // one sandbox of acme's, made before the limits apply
}

// TestQuotaConcurrent: creates racing at a tenant's quota never take it
// past it, whatever their order; other tenants are not held to it.
func TestQuotaConcurrent(t *testing.T) {
	tests := []struct {
		name   string
		limits tenant.Limits
		n      int // sandboxes per create
		want   int // sandboxes that may exist at the end
	}{
		{"max_sandboxes", tenant.Limits{MaxSandboxes: 3}, 1, 3},
		{"max_sandboxes, n=2", tenant.Limits{MaxSandboxes: 5}, 2, 4},
		{"max_memory_mib", tenant.Limits{MaxMemoryMiB: 768}, 1, 3},
		{"max_vcpus", tenant.Limits{MaxVCPUs: 2}, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := as(testCtx(t), "acme", tt.limits)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.svc.Create(ctx, CreateOptions{N: tt.n})
				}()
			}
			wg.Wait()
			ok := 0
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case !errors.Is(err, ErrQuota):
					t.Errorf("create: %v, want success or ErrQuota", err)
				}
			}
			got := len(e.svc.List(ctx))
			if got != tt.want || ok*tt.n != got {
				t.Fatalf("%d creates of %d succeeded, %d sandboxes exist; want %d", ok, tt.n, got, tt.want)
			}
			if u := e.svc.TenantUse(context.Background(), "acme"); u.Sandboxes != tt.want {
				t.Errorf("TenantUse = %+v, want %d sandboxes", u, tt.want)
			}
			// Another tenant has its own quota.
			if _, err := e.svc.Create(as(testCtx(t), "other", tt.limits), CreateOptions{}); err != nil {
				t.Errorf("another tenant's create: %v", err)
			}
		})
	}
}

// TestTenantUse sums a tenant's live sandboxes, not its paused one, whose
// saved state counts as disk with its snapshots.
func TestTenantUse(t *testing.T) {
	e := newEnv(t)
	acme := as(testCtx(t), "acme", tenant.Limits{})
	a := e.createOne(t, CreateOptions{})
	_ = a // the daemon's (default tenant): not acme's
	infos, err := e.svc.Create(acme, CreateOptions{N: 2, CPUs: 2, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(acme, CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.open(t, infos[0].ID, infos[0].Token).Branch(acme, BranchOptions{Tag: "snap"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pause(acme, infos[1].ID); err != nil {
		t.Fatal(err)
	}
	u := e.svc.TenantUse(context.Background(), "acme")
	if u.Sandboxes != 2 || u.VCPUs != 3 || u.MemoryMiB != 768 || u.DiskMiB < 1 {
		t.Errorf("TenantUse(acme) = %+v, want 2 sandboxes, 3 vcpus, 768 MiB and some disk", u)
	}
	if u := e.svc.TenantUse(as(testCtx(t), "other", tenant.Limits{}), "acme"); u != (TenantUse{}) {
		t.Errorf("another tenant learnt acme's use: %+v", u)
	}
}

// TestTenantScoping: another tenant's sandbox or snapshot is not found by
// any method, in the same words as an id that names nothing; the
// daemon's shared snapshot is every tenant's to see and spawn from, not to
// delete; admins and the daemon's own calls see everything.
func TestTenantScoping(t *testing.T) {
	e := newEnv(t)
	bg := testCtx(t)
	a := as(bg, "acme", tenant.Limits{})
	b := as(bg, "beta", tenant.Limits{})
	admin := tenant.NewContext(bg, tenant.Principal{KeyID: "bootstrap", Tenant: tenant.Default, Admin: true})
	e.build(t, BuildOptions{Tag: "golden"}) // the daemon's: shared
	infos, err := e.svc.Create(a, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb := infos[0]
	if _, err := e.open(t, sb.ID, sb.Token).Branch(a, BranchOptions{Tag: "acme-snap"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.BuildSnapshot(a, BuildOptions{Tag: "acme-built", Warm: "true"}); err != nil {
		t.Fatal(err)
	}
	paused, err := e.svc.Create(a, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pause(a, paused[0].ID); err != nil {
		t.Fatal(err)
	}

	sandboxCalls := []struct {
		name string
		call func(ctx context.Context, id string) error
	}{
		{"Get", func(ctx context.Context, id string) error { _, err := e.svc.Get(ctx, id); return err }},
		{"Open", func(ctx context.Context, id string) error { _, err := e.svc.Open(ctx, id, sb.Token); return err }},
		{"OpenAuto", func(ctx context.Context, id string) error { _, err := e.svc.OpenAuto(ctx, id, sb.Token); return err }},
		{"Extend", func(ctx context.Context, id string) error { _, err := e.svc.Extend(ctx, id, time.Minute); return err }},
		{"SetNetwork", func(ctx context.Context, id string) error {
			_, err := e.svc.SetNetwork(ctx, id, e.svc.decodePolicy(id, ""))
			return err
		}},
		{"Pause", func(ctx context.Context, id string) error { _, err := e.svc.Pause(ctx, id); return err }},
		{"Resume", func(ctx context.Context, id string) error { _, err := e.svc.Resume(ctx, id, 0); return err }},
		{"DialPort", func(ctx context.Context, id string) error { _, err := e.svc.DialPort(ctx, id, 8080); return err }},
		{"Delete", func(ctx context.Context, id string) error { return e.svc.Delete(ctx, id) }},
	}
	for _, c := range sandboxCalls {
		t.Run(c.name, func(t *testing.T) {
			for _, id := range []string{sb.ID, paused[0].ID} {
				err := c.call(b, id)
				_, unknown := e.svc.Get(b, "sb-000000000000")
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s(beta, acme's %s) = %v, want ErrNotFound", c.name, id, err)
				}
				if c.name == "Get" && err.Error() != strings.Replace(unknown.Error(), "sb-000000000000", id, 1) {
					t.Errorf("another tenant's sandbox: %q; an unknown one: %q", err, unknown)
				}
			}
		})
	}
	if _, err := e.svc.Get(a, sb.ID); err != nil {
		t.Fatalf("acme lost its own sandbox: %v", err)
	}

	for _, c := range []struct {
		name string
		call func(ctx context.Context, tag string) error
	}{
		{"Snapshot", func(ctx context.Context, tag string) error { _, err := e.svc.Snapshot(ctx, tag); return err }},
		{"spawn", func(ctx context.Context, tag string) error {
			_, err := e.svc.Create(ctx, CreateOptions{SnapshotTag: tag, SnapshotToken: sb.Token})
			return err
		}},
		{"DeleteSnapshot", func(ctx context.Context, tag string) error { return e.svc.DeleteSnapshot(ctx, tag) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, tag := range []string{"acme-snap", "acme-built"} {
				if err := c.call(b, tag); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s(beta, %s) = %v, want ErrNotFound", c.name, tag, err)
				}
			}
		})
	}
	// Tags are one namespace: a taken one is a conflict, whoever took it.
	if _, err := e.svc.BuildSnapshot(b, BuildOptions{Tag: "acme-snap"}); !errors.Is(err, ErrConflict) || strings.Contains(err.Error(), "acme") && !strings.Contains(err.Error(), "acme-snap") {
		t.Errorf("beta's build over acme's tag: %v, want a conflict that names no tenant", err)
	}

	tags := func(ctx context.Context) []string {
		var out []string
		for _, sn := range e.svc.Snapshots(ctx) {
			out = append(out, sn.Tag)
		}
		slices.Sort(out)
		return out
	}
	if got := tags(b); !slices.Equal(got, []string{"golden"}) {
		t.Errorf("beta's snapshots = %v, want only the shared one", got)
	}
	if got := tags(a); !slices.Equal(got, []string{"acme-built", "acme-snap", "golden"}) {
		t.Errorf("acme's snapshots = %v", got)
	}
	if got := e.svc.List(b); len(got) != 0 {
		t.Errorf("beta lists %d sandboxes of others", len(got))
	}
	if got := len(e.svc.List(a)); got != 2 {
		t.Errorf("acme lists %d sandboxes, want 2", got)
	}
	for _, ctx := range []context.Context{admin, bg} {
		if got := len(e.svc.List(ctx)); got != 2 {
			t.Errorf("an admin or the daemon lists %d sandboxes, want every tenant's 2", got)
		}
	}

	// The shared snapshot: beta spawns from it (its sandbox is beta's),
	// may not delete it; an admin may.
	spawned, err := e.svc.Create(b, CreateOptions{SnapshotTag: "golden"})
	if err != nil {
		t.Fatalf("beta's spawn from the shared snapshot: %v", err)
	}
	if _, err := e.svc.Get(a, spawned[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("acme sees beta's sandbox spawned from the shared snapshot: %v", err)
	}
	if err := e.svc.Delete(b, spawned[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSnapshot(b, "golden"); !errors.Is(err, ErrForbidden) {
		t.Errorf("beta deleted the shared snapshot: %v, want ErrForbidden", err)
	}

	// Branch children and saves are the source's tenant's.
	res, err := e.open(t, sb.ID, sb.Token).Branch(a, BranchOptions{Tag: "acme-b2", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Get(b, res.Children[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("beta sees acme's branch child: %v", err)
	}
	if row := e.row(t, res.Children[0].ID); row.Tenant != "acme" {
		t.Errorf("branch child recorded as %q's", row.Tenant)
	}
	// Ownership survives a restart.
	e.restart(t)
	if _, err := e.svc.Get(b, sb.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a restart beta sees acme's sandbox: %v", err)
	}
	if _, err := e.svc.Snapshot(b, "acme-snap"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a restart beta sees acme's snapshot: %v", err)
	}
	if _, err := e.svc.Snapshot(b, "golden"); err != nil {
		t.Errorf("after a restart the shared snapshot is not: %v", err)
	}
	if err := e.svc.DeleteSnapshot(admin, "acme-built"); err != nil {
		t.Errorf("an admin's delete of acme's snapshot: %v", err)
	}
}

// TestEnsureSnapshotShares: a golden snapshot saved before tenants existed
// (the default tenant's) is shared once the daemon ensures it at start,
// so every tenant spawns from it.
func TestEnsureSnapshotShares(t *testing.T) {
	e := newEnv(t)
	old := tenant.NewContext(testCtx(t), tenant.Principal{KeyID: "bootstrap", Tenant: tenant.Default, Admin: true})
	if _, err := e.svc.BuildSnapshot(old, BuildOptions{Tag: "golden", Image: "default", Warm: "true"}); err != nil {
		t.Fatal(err)
	}
	beta := as(testCtx(t), "beta", tenant.Limits{})
	if _, err := e.svc.Snapshot(beta, "golden"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the default tenant's snapshot to beta: %v, want not found", err)
	}
	builds := len(e.rt.Checkpoints())
	if err := e.svc.EnsureSnapshot(testCtx(t), "golden", "default"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rt.Checkpoints()); n != builds {
		t.Errorf("EnsureSnapshot rebuilt an up-to-date snapshot (%d checkpoints, were %d)", n, builds)
	}
	e.restart(t) // it stays shared
	if _, err := e.svc.Create(beta, CreateOptions{SnapshotTag: "golden"}); err != nil {
		t.Errorf("beta's spawn from the ensured snapshot: %v", err)
	}
}
