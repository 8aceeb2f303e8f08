package bench

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/fakedaemon"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func TestSnapshotBenches(t *testing.T) {
	fake := fakedaemon.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	var log strings.Builder
	b := &bencher{
		cl: client.New(srv.URL, "key"),
		o: Options{Spawns: 3, PoolHandouts: 2, PoolSize: 2, SpawnN: 4, Branches: 2,
			BranchMiB: IntList{0, 50}, ChainDepth: 3, ChainSamples: 2},
		log: &log,
	}
	var rows []result
	b.runSnapshotBenches(context.Background(), apitype.Info{}, func(r result) { rows = append(rows, r) })

	byName := make(map[string]result)
	for _, r := range rows {
		byName[r.Name] = r
	}
	for _, name := range []string{"snapshot_build", "spawn", "pool_handout", "spawn_4", "branch_pause_0", "branch_pause_50",
		"chain_depth_0", "chain_depth_3", "chain_depth_3_vs_0"} {
		r, ok := byName[name]
		if !ok {
			t.Errorf("no row %s", name)
			continue
		}
		if r.Error != "" {
			t.Errorf("%s failed: %s", name, r.Error)
		}
	}
	if r := byName["spawn"]; r.N != 3 {
		t.Errorf("spawn N = %d, want 3", r.N)
	}
	if r := byName["branch_pause_50"]; r.P50 != 42 || r.N != 2 {
		t.Errorf("branch_pause_50 = %+v", r)
	}
	if r := byName["branch_stopped_50"]; r.P50 != 7 || r.N != 2 {
		t.Errorf("branch_stopped_50 = %+v", r)
	}
	// This test runs without the daemon's processes: Pss fails, saying so.
	if r := byName["pss_per_child"]; !strings.Contains(r.Error, "daemon's host") {
		t.Errorf("pss_per_child = %+v", r)
	}
	if sbs, sis := fake.Sandboxes(), fake.Snapshots(); len(sbs) != 0 || len(sis) != 0 {
		t.Errorf("left behind sandboxes %v, snapshots %v\n%s", sbs, sis, log.String())
	}
}

// TestBenchCleanup checks that cleanup finds sandboxes it was never told
// of, spawned from its snapshots, and deletes snapshots children first.
func TestBenchCleanup(t *testing.T) {
	fake := fakedaemon.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cl := client.New(srv.URL, "key")
	ctx := context.Background()
	cu := &cleanup{cl: cl, prefix: "bench-1", logf: t.Logf}

	mk := func(tag string) {
		cu.addSnapshot(tag)
		if _, err := cl.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag}); err != nil {
			t.Fatal(err)
		}
	}
	mk("bench-1")
	if _, err := cl.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "other"}); err != nil { // not ours
		t.Fatal(err)
	}
	sbs, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "bench-1"})
	if err != nil {
		t.Fatal(err)
	}
	cu.addSandboxes(sbs...)
	// A chain bench-1 -> bench-1-c1 -> bench-1-c2, made in order.
	parent := sbs[0]
	for _, tag := range []string{"bench-1-c1", "bench-1-c2"} {
		cu.addSnapshot(tag)
		if _, err := cl.Branch(ctx, parent.ID, parent.Token, apitype.BranchRequest{Tag: tag}); err != nil {
			t.Fatal(err)
		}
		kids, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag, SandboxToken: parent.Token})
		if err != nil {
			t.Fatal(err)
		}
		parent = kids[0] // not told to cleanup
	}
	// A spawn whose answer was lost.
	fake.SetDropSpawns(true)
	if _, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "bench-1", N: 3}); err == nil {
		t.Fatal("dropped spawn succeeded")
	}
	// Someone else's sandbox, cold.
	fake.SetDropSpawns(false)
	if _, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}

	cu.run(ctx)
	if left := fake.Snapshots(); !slices.Equal(left, []string{"other"}) {
		t.Errorf("snapshots left: %v, want [other]", left)
	}
	if left := fake.Sandboxes(); len(left) != 1 {
		t.Errorf("sandboxes left: %v, want 1 (not ours)", left)
	}
	if n := fake.Conflicts(); n != 0 {
		t.Errorf("%d deletes refused: not deepest first", n)
	}
}
