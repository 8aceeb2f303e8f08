package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/internal/hostres"
	"github.com/cove-sandbox/cove/internal/store"
)

// A sandbox's disk and process limits (its own or the defaults) and the
// daemon's open-files limit reach the runtime and the record; a snapshot's
// children run with the snapshot's, and asking them for others is refused.
func TestCreateLimits(t *testing.T) {
	e := newEnv(t)
	def := e.createOne(t, CreateOptions{})
	own := e.createOne(t, CreateOptions{DiskMiB: 512, Pids: 100})
	for _, tc := range []struct {
		info Info
		want store.Limits
	}{
		{def, store.Limits{DiskMiB: testLimits.DefaultDiskMiB, Pids: testLimits.DefaultPids, OpenFiles: testLimits.OpenFiles}},
		{own, store.Limits{DiskMiB: 512, Pids: 100, OpenFiles: testLimits.OpenFiles}},
	} {
		if tc.info.DiskMiB != tc.want.DiskMiB || tc.info.Pids != tc.want.Pids {
			t.Errorf("info = %+v, want %+v", tc.info, tc.want)
		}
		spec := e.rt.Spec(tc.info.ID)
		if got := (store.Limits{DiskMiB: spec.DiskMiB, Pids: spec.Pids, OpenFiles: spec.OpenFiles}); got != tc.want {
			t.Errorf("runtime spec limits = %+v, want %+v", got, tc.want)
		}
		if got := e.row(t, tc.info.ID).Limits; got != tc.want {
			t.Errorf("record limits = %+v, want %+v", got, tc.want)
		}
	}

	e.build(t, BuildOptions{Tag: "small", DiskMiB: 256, Pids: 128})
	sn, _ := e.svc.Snapshot(context.Background(), "small")
	if sn.DiskMiB != 256 || sn.Pids != 128 || sn.OpenFiles != testLimits.OpenFiles {
		t.Errorf("snapshot = %+v", sn)
	}
	// A later daemon's other defaults do not change what its children get:
	// a checkpoint restores only with the bounds it was saved with.
	e.cfg.Limits.OpenFiles = 2 * testLimits.OpenFiles
	e.restart(t)
	kid := e.createOne(t, CreateOptions{SnapshotTag: "small"})
	if spec := e.rt.Spec(kid.ID); kid.DiskMiB != 256 || kid.Pids != 128 || spec.DiskMiB != 256 || spec.Pids != 128 || spec.OpenFiles != testLimits.OpenFiles {
		t.Errorf("child %+v, spec %+v: want the snapshot's limits", kid, spec)
	}
	for _, o := range []CreateOptions{{SnapshotTag: "small", DiskMiB: 512}, {SnapshotTag: "small", Pids: 256}} {
		_, err := e.svc.Create(testCtx(t), o)
		wantErr(t, err, ErrInvalid)
	}
	if _, err := e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "small", DiskMiB: 256, Pids: 128}); err != nil {
		t.Errorf("spawn with the snapshot's own limits: %v", err)
	}
	res, err := e.open(t, kid.ID, kid.Token).Branch(testCtx(t), BranchOptions{Tag: "small2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Snapshot.Limits; got != sn.Limits {
		t.Errorf("branch's limits = %+v, want its source's %+v", got, sn.Limits)
	}
}

// TestMemoryBudget: a create is admitted only while the memory limits of
// every sandbox, warm pools included, stay within the budget, all or
// nothing, and a refusal names the budget and leaves nothing.
func TestMemoryBudget(t *testing.T) {
	const mem = 256
	e := newEnv(t, func(c *Config) { c.Limits.MemoryBudgetMiB, c.PoolMemoryMiB = 4*mem, 4*mem })
	ctx := testCtx(t)
	e.createOne(t, CreateOptions{MemoryMiB: mem})
	starts := e.rt.Starts()
	_, err := e.svc.Create(ctx, CreateOptions{N: 4, MemoryMiB: mem})
	wantErr(t, err, ErrUnavailable)
	if !strings.Contains(err.Error(), "memory budget of 1024 MiB") {
		t.Errorf("error %q does not name the budget", err)
	}
	if e.rt.Starts() != starts || e.svc.Count() != 1 || len(e.rows(t)) != 1 {
		t.Errorf("a refused create left something: %d starts, %d live, rows %v", e.rt.Starts()-starts, e.svc.Count(), e.rows(t))
	}
	two, err := e.svc.Create(ctx, CreateOptions{N: 2, MemoryMiB: mem})
	if err != nil {
		t.Fatalf("create within the budget: %v", err)
	}

	// A warm pool counts: one pooled sandbox fills the budget, and the
	// pool is not refilled past it.
	e.build(t, BuildOptions{Tag: "p", MemoryMiB: mem, PoolSize: 2})
	waitFor(t, "one pooled sandbox", func() bool { sn, _ := e.svc.Snapshot(context.Background(), "p"); return sn.PoolReady == 1 })
	if sn := e.svc.nextToFill(); sn != nil {
		t.Errorf("nextToFill picked %s past the memory budget", sn.rec.Tag)
	}
	_, err = e.svc.Create(ctx, CreateOptions{MemoryMiB: MinMemoryMiB})
	wantErr(t, err, ErrUnavailable)
	// A spawn is a create like any other; freeing memory admits it.
	if err := e.svc.Delete(ctx, two[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, CreateOptions{SnapshotTag: "p"}); err != nil {
		t.Errorf("spawn within the budget: %v", err)
	}
}

// TestHostFloor: a create is refused, leaving nothing, when its sandboxes
// would take the host's available memory past the floor or its tasks past
// kernel.pid_max, whatever the memory budget says; a failed look at the
// host admits it.
func TestHostFloor(t *testing.T) {
	var mu sync.Mutex
	host := hostres.Reading{MemTotalMiB: 24000, MemAvailableMiB: 2000, Tasks: 1000, TaskMax: 32768}
	var lookErr error
	e := newEnv(t, func(c *Config) {
		c.Host = func() (hostres.Reading, error) { mu.Lock(); defer mu.Unlock(); return host, lookErr }
		c.HostCost = hostres.Cost{MemoryMiB: 30, Tasks: 60}
		c.Limits.HostMemoryFloorMiB = 1000
	})
	set := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	ctx := testCtx(t)
	tests := []struct {
		name  string
		setup func()
		n     int
		want  string // in the refusal; "" admits
	}{
		{"fits", func() {}, 3, ""},
		{"memory floor", func() { host.MemAvailableMiB = 1300 }, 15, "floor of 1000 MiB"},
		{"pid_max", func() { host.MemAvailableMiB, host.Tasks = 20000, 31100 }, 2, "kernel.pid_max"},
		{"failed look admits", func() { lookErr = errors.New("no /proc") }, 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set(tc.setup)
			starts, live := e.rt.Starts(), e.svc.Count()
			_, err := e.svc.Create(ctx, CreateOptions{N: tc.n})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("create of %d: %v", tc.n, err)
				}
				return
			}
			wantErr(t, err, ErrUnavailable)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if e.rt.Starts() != starts || e.svc.Count() != live {
				t.Errorf("a refused create left something: %d starts, %d live, was %d", e.rt.Starts()-starts, e.svc.Count(), live)
			}
		})
	}
}
