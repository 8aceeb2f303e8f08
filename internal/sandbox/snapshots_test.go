package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

func TestBuildSnapshot(t *testing.T) {
	e := newEnv(t)
	sn, err := e.svc.BuildSnapshot(testCtx(t), BuildOptions{Tag: "base-1.0_x", Image: "other", Warm: "echo warm > w.txt",
		CPUs: 2, MemoryMiB: 512, PoolSize: 0})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Snapshot{Tag: "base-1.0_x", Backend: "fake", Image: "other-0002", CPUs: 2, MemoryMiB: 512,
		SizeBytes: sn.SizeBytes, CreatedAt: sn.CreatedAt, RuntimeVersion: "fake 1",
		Limits: store.Limits{DiskMiB: testLimits.DefaultDiskMiB, Pids: testLimits.DefaultPids, OpenFiles: testLimits.OpenFiles},
		Tenant: tenant.Shared} // built by the daemon (no principal): every tenant's to spawn from
	if sn.Snapshot != want || sn.SizeBytes == 0 || sn.PoolReady != 0 || sn.Children != 0 {
		t.Errorf("snapshot = %+v, want %+v", sn, want)
	}
	cps := e.rt.Checkpoints()
	if len(cps) != 1 {
		t.Fatalf("checkpoints = %+v", cps)
	}
	if cp := cps[0]; cp.LeaveRunning || e.rt.Warms(cp.ID) != 1 {
		t.Errorf("build checkpoint %+v, warmed %d times; want a stopping checkpoint of a warmed sandbox", cp, e.rt.Warms(cp.ID))
	}
	// The builder is started as one; a sandbox spawned from it (below) is
	// not.
	if !e.rt.Spec(cps[0].ID).Golden {
		t.Error("the builder's spec is not Golden")
	}
	dir := filepath.Join(e.cfg.SnapshotDir, "base-1.0_x")
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		t.Errorf("snapshot directory: %v", err)
	}
	// The builder sandbox is gone and was never a live sandbox.
	if len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 || e.svc.Count() != 0 {
		t.Errorf("build left runtime %v, store %v, %d live", e.rt.IDs(), e.rows(t), e.svc.Count())
	}
	recs, err := e.st.Snapshots(testCtx(t))
	if err != nil || len(recs) != 1 || recs[0].Tag != "base-1.0_x" {
		t.Errorf("store snapshots = %+v, %v", recs, err)
	}
	if got := e.svc.Snapshots(context.Background()); len(got) != 1 || got[0].Tag != "base-1.0_x" {
		t.Errorf("Snapshots = %+v", got)
	}
	child := e.createOne(t, CreateOptions{SnapshotTag: "base-1.0_x"})
	if e.rt.Spec(child.ID).Golden {
		t.Error("a spawned sandbox's spec is Golden")
	}
	// The pool size defaults to the configured one.
	e = newEnv(t, func(c *Config) { c.DefaultPoolSize = 3 })
	if sn := e.build(t, BuildOptions{Tag: "dflt", PoolSize: -1}); sn.PoolSize != 3 {
		t.Errorf("default pool size = %d, want 3", sn.PoolSize)
	}
}

func TestBuildSnapshotErrors(t *testing.T) {
	e := newEnv(t)
	e.build(t, BuildOptions{Tag: "dup"})
	tests := []struct {
		name string
		opts BuildOptions
		want error
	}{
		{"empty tag", BuildOptions{Tag: ""}, ErrInvalid},
		{"tag with slash", BuildOptions{Tag: "a/b"}, ErrInvalid},
		{"tag dotdot", BuildOptions{Tag: ".."}, ErrInvalid},
		{"tag starting with a dash", BuildOptions{Tag: "-x"}, ErrInvalid},
		{"tag starting with a dot", BuildOptions{Tag: ".tmp-x"}, ErrInvalid},
		{"tag with a space", BuildOptions{Tag: "a b"}, ErrInvalid},
		{"tag too long", BuildOptions{Tag: strings.Repeat("a", 65)}, ErrInvalid},
		{"pool too big", BuildOptions{Tag: "p", PoolSize: 65}, ErrInvalid},
		{"cpus over max", BuildOptions{Tag: "p", CPUs: testLimits.MaxCPUs + 1}, ErrInvalid},
		{"memory under min", BuildOptions{Tag: "p", MemoryMiB: 1}, ErrInvalid},
		{"unknown image", BuildOptions{Tag: "p", Image: "nope"}, ErrNotFound},
		{"duplicate tag", BuildOptions{Tag: "dup"}, ErrConflict},
		{"warm command fails", BuildOptions{Tag: "p", Warm: "echo broken >&2; exit 3"}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.BuildSnapshot(testCtx(t), tc.opts)
			wantErr(t, err, tc.want)
			if got := e.svc.Snapshots(context.Background()); len(got) != 1 {
				t.Errorf("Snapshots = %+v, want only dup", got)
			}
			if len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 {
				t.Errorf("failed build left runtime %v, store %v", e.rt.IDs(), e.rows(t))
			}
		})
	}
	// A failed build releases its tag.
	e.build(t, BuildOptions{Tag: "p"})
}

func TestDeleteSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "base"})
	child := e.createOne(t, CreateOptions{SnapshotTag: "base"})
	wantErr(t, e.svc.DeleteSnapshot(ctx, "base"), ErrConflict)
	if _, err := e.svc.Snapshot(context.Background(), "base"); err != nil {
		t.Fatalf("a refused delete removed the snapshot: %v", err)
	}
	if err := e.svc.Delete(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.SnapshotDir, "base")); !os.IsNotExist(err) {
		t.Errorf("snapshot directory still there: %v", err)
	}
	if recs, _ := e.st.Snapshots(ctx); len(recs) != 0 {
		t.Errorf("store still holds %+v", recs)
	}
	_, err := e.svc.Snapshot(context.Background(), "base")
	wantErr(t, err, ErrNotFound)
	wantErr(t, e.svc.DeleteSnapshot(ctx, "base"), ErrNotFound)
	_, err = e.svc.Create(ctx, CreateOptions{SnapshotTag: "base"})
	wantErr(t, err, ErrNotFound)
	// The tag is free again.
	e.build(t, BuildOptions{Tag: "base"})
}

func TestBranch(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	root := e.createOne(t, CreateOptions{})
	e.exec(t, root.ID, root.Token, "echo root > state.txt")

	// Each step branches the first child of the step before.
	steps := []struct {
		tag        string
		n          int
		wantDepth  int
		wantParent string
	}{
		{"b1", 2, 1, ""},
		{"b2", 1, 2, "b1"},
		{"b3", 0, 3, "b2"},
	}
	from := root
	for _, st := range steps {
		nCheckpoints := len(e.rt.Checkpoints())
		res, err := e.open(t, from.ID, from.Token).Branch(ctx, BranchOptions{Tag: st.tag, N: st.n, TTL: time.Minute})
		if err != nil {
			t.Fatalf("Branch(%s, %s): %v", from.ID, st.tag, err)
		}
		sn := res.Snapshot
		if sn.Tag != st.tag || sn.Depth != st.wantDepth || sn.Parent != st.wantParent || sn.BranchedFrom != from.ID ||
			sn.PoolSize != 0 || sn.Image != "default-0001" || sn.Children != st.n {
			t.Errorf("%s: snapshot = %+v; want depth %d, parent %q, branched from %s, %d children",
				st.tag, sn, st.wantDepth, st.wantParent, from.ID, st.n)
		}
		if res.Pause < 0 {
			t.Errorf("%s: pause %s", st.tag, res.Pause)
		}
		if cps := e.rt.Checkpoints()[nCheckpoints:]; len(cps) != 1 || cps[0].ID != from.ID || !cps[0].LeaveRunning {
			t.Errorf("%s: checkpoints %+v, want one live checkpoint of %s", st.tag, cps, from.ID)
		}
		if len(res.Children) != st.n {
			t.Fatalf("%s: %d children, want %d", st.tag, len(res.Children), st.n)
		}
		for _, c := range res.Children {
			if c.SnapshotTag != st.tag || c.Token == "" || c.ExpiresAt.Sub(c.CreatedAt) != time.Minute {
				t.Errorf("%s: child %+v", st.tag, c)
			}
			if got, want := e.rt.RestoredFrom(c.ID), filepath.Join(e.cfg.SnapshotDir, st.tag); got != want {
				t.Errorf("%s: child restored from %q, want %q", st.tag, got, want)
			}
		}
		// The source keeps running.
		if got := e.exec(t, from.ID, from.Token, "cat state.txt"); got != "root\n" {
			t.Errorf("%s: source after branch: %q", st.tag, got)
		}
		if st.n > 0 {
			from = res.Children[0]
			// The fake restores nothing, so give the child the state it would have.
			e.exec(t, from.ID, from.Token, "echo root > state.txt")
		}
	}

	// A generated tag names the source.
	res, err := e.open(t, root.ID, root.Token).Branch(ctx, BranchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Snapshot.Tag, root.ID+"-") || len(res.Children) != 0 {
		t.Errorf("generated branch = %+v", res)
	}
	if recs, _ := e.st.Snapshots(ctx); slices.ContainsFunc(recs, func(r store.Snapshot) bool { return r.Pending }) {
		t.Errorf("answered branches left pending snapshots: %+v", recs)
	}
}

// TestBranchedSnapshotNeedsToken: a snapshot saved from a sandbox holds
// its state, so spawning from it takes that sandbox's token; one built
// from an image takes none.
func TestBranchedSnapshotNeedsToken(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "built"})
	src := e.createOne(t, CreateOptions{})
	other := e.createOne(t, CreateOptions{})
	if _, err := e.open(t, src.ID, src.Token).Branch(ctx, BranchOptions{Tag: "saved"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tag, token string
		want             error
	}{
		{"built, no token", "built", "", nil},
		{"built, any token", "built", other.Token, nil},
		{"saved, no token", "saved", "", ErrNoToken},
		{"saved, another sandbox's token", "saved", other.Token, ErrForbidden},
		{"saved, the source's token", "saved", src.Token, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.rt.IDs()
			infos, err := e.svc.Create(ctx, CreateOptions{SnapshotTag: tc.tag, SnapshotToken: tc.token})
			if tc.want == nil {
				if err != nil || len(infos) != 1 {
					t.Fatalf("Create = %+v, %v", infos, err)
				}
				e.svc.Delete(ctx, infos[0].ID)
				return
			}
			wantErr(t, err, tc.want)
			if got := e.rt.IDs(); !slices.Equal(got, before) {
				t.Errorf("a refused spawn changed the runtime: %v, was %v", got, before)
			}
		})
	}
	// The source's token stays the credential after the source is gone.
	if err := e.svc.Delete(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if _, err := e.svc.Create(ctx, CreateOptions{SnapshotTag: "saved", SnapshotToken: src.Token}); err != nil {
		t.Errorf("spawn with the token of the snapshot's gone source, after a restart: %v", err)
	}
}

// TestBranchChildrenFail: a branch whose children fail to start keeps its
// snapshot, as its error says, settled rather than pending.
func TestBranchChildrenFail(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	src := e.createOne(t, CreateOptions{})
	e.rt.FailNthRestore(2, errors.New("boom"))
	_, err := e.open(t, src.ID, src.Token).Branch(ctx, BranchOptions{Tag: "kept", N: 2})
	if err == nil || !strings.Contains(err.Error(), "snapshot kept saved") {
		t.Fatalf("Branch = %v, want an error that says the snapshot was saved", err)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{src.ID}) {
		t.Errorf("runtime holds %v, want only the source", got)
	}
	if recs, _ := e.st.Snapshots(ctx); len(recs) != 1 || recs[0].Pending {
		t.Fatalf("store holds %+v, want the snapshot, not pending", recs)
	}
	e.restart(t)
	if _, err := e.svc.Snapshot(context.Background(), "kept"); err != nil {
		t.Errorf("after a restart: %v", err)
	}
}

func TestBranchErrors(t *testing.T) {
	e := newEnv(t)
	root := e.createOne(t, CreateOptions{})
	sb := e.open(t, root.ID, root.Token)
	if _, err := sb.Branch(testCtx(t), BranchOptions{Tag: "taken"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts BranchOptions
		want error
	}{
		{"n negative", BranchOptions{Tag: "x", N: -1}, ErrInvalid},
		{"n over max", BranchOptions{Tag: "x", N: MaxN + 1}, ErrInvalid},
		{"ttl negative", BranchOptions{Tag: "x", TTL: -time.Second}, ErrInvalid},
		{"ttl over max", BranchOptions{Tag: "x", TTL: testLimits.MaxTTL + time.Second}, ErrInvalid},
		{"bad tag", BranchOptions{Tag: "../x"}, ErrInvalid},
		{"duplicate tag", BranchOptions{Tag: "taken"}, ErrConflict},
		{"children over the limit", BranchOptions{Tag: "x", N: testLimits.MaxSandboxes}, ErrLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sb.Branch(testCtx(t), tc.opts)
			wantErr(t, err, tc.want)
			if got := e.rt.IDs(); !slices.Equal(got, []string{root.ID}) {
				t.Errorf("runtime holds %v", got)
			}
		})
	}
}

func TestRecoverSnapshots(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "keep"})
	// What a crash can leave: a checkpoint half written, one without a
	// record, and a record without its checkpoint.
	for _, d := range []string{".tmp-x-0000", "norecord"} {
		if err := os.MkdirAll(filepath.Join(e.cfg.SnapshotDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.PutSnapshot(ctx, store.Snapshot{Tag: "nodir", Backend: "fake", Image: "default-0001", CPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	// And a branch's snapshot, whole, whose branch never answered.
	if err := os.MkdirAll(filepath.Join(e.cfg.SnapshotDir, "pending"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.st.PutSnapshot(ctx, store.Snapshot{Tag: "pending", Backend: "fake", Image: "default-0001", CPUs: 1, MemoryMiB: 256, Pending: true}); err != nil {
		t.Fatal(err)
	}

	e.restart(t)

	var tags []string
	for _, sn := range e.svc.Snapshots(context.Background()) {
		tags = append(tags, sn.Tag)
	}
	if !slices.Equal(tags, []string{"keep"}) {
		t.Errorf("Snapshots after recover = %v, want [keep]", tags)
	}
	ents, _ := os.ReadDir(e.cfg.SnapshotDir)
	if len(ents) != 1 || ents[0].Name() != "keep" {
		t.Errorf("snapshot directory holds %v, want only keep", ents)
	}
	if recs, _ := e.st.Snapshots(ctx); len(recs) != 1 || recs[0].Tag != "keep" {
		t.Errorf("store holds %+v, want only keep", recs)
	}
	child := e.createOne(t, CreateOptions{SnapshotTag: "keep"})
	if got := e.exec(t, child.ID, child.Token, "echo ok"); got != "ok\n" {
		t.Errorf("exec in a sandbox spawned after recover = %q", got)
	}
}

func TestEnsureSnapshot(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("EnsureSnapshot runs the default warm command, which needs python3")
	}
	e := newEnv(t)
	ctx := testCtx(t)
	images := e.cfg.Images.(*runtimetest.Images)
	image := func() string { sn, _ := e.svc.Snapshot(context.Background(), "dflt"); return sn.Image }

	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if got := image(); got != "default-0001" {
		t.Fatalf("built from %q, want default-0001", got)
	}
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rt.Checkpoints()); n != 1 {
		t.Errorf("%d checkpoints; an up-to-date snapshot was rebuilt", n)
	}

	// A new image: the snapshot is rebuilt, but not while it has children.
	child := e.createOne(t, CreateOptions{SnapshotTag: "dflt"})
	images.Set("default", "default-0003")
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if got := image(); got != "default-0001" {
		t.Errorf("a snapshot with children was rebuilt from %q", got)
	}
	if err := e.svc.Delete(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if got := image(); got != "default-0003" {
		t.Errorf("rebuilt from %q, want default-0003", got)
	}
	if n := len(e.rt.Checkpoints()); n != 2 {
		t.Errorf("%d checkpoints, want 2", n)
	}

	// A new runtime version cannot restore the old checkpoint: spawning
	// says so, and EnsureSnapshot rebuilds it.
	e.rt.SetVersion("fake 2")
	e.restart(t)
	_, err := e.svc.Create(ctx, CreateOptions{SnapshotTag: "dflt"})
	wantErr(t, err, ErrConflict)
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if sn, _ := e.svc.Snapshot(context.Background(), "dflt"); sn.RuntimeVersion != "fake 2" {
		t.Errorf("after a runtime upgrade the snapshot records %q", sn.RuntimeVersion)
	}
	e.createOne(t, CreateOptions{SnapshotTag: "dflt"})

	wantErr(t, e.svc.EnsureSnapshot(ctx, "x", "nope"), ErrNotFound)
}
