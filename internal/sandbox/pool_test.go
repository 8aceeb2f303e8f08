package sandbox

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestWarmPool(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 4 * testLimits.DefaultMemoryMiB })
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "warm", PoolSize: 2})
	poolReady := func() int { s, _ := e.svc.Snapshot(context.Background(), "warm"); return s.PoolReady }
	waitFor(t, "the pool to fill", func() bool { return poolReady() == 2 })

	pooled := e.rt.IDs()
	if len(pooled) != 2 || e.svc.Count() != 0 || len(e.svc.List(context.Background())) != 0 {
		t.Fatalf("runtime holds %v, %d live; want 2 pooled sandboxes and none live", pooled, e.svc.Count())
	}
	for _, id := range pooled {
		if rec := e.row(t, id); rec.Status != StatusPooled || rec.TokenHash != "" {
			t.Errorf("pooled record = %+v", rec)
		}
		if got := e.rt.RestoredCalls(id); !slices.Equal(got, []string{id}) {
			t.Errorf("pooled %s: Restored(%v)", id, got)
		}
	}

	info := e.createOne(t, CreateOptions{SnapshotTag: "warm", TTL: time.Minute})
	if n := e.svc.Stats().PoolHits.Load(); n != 1 {
		t.Errorf("Stats().PoolHits = %d, want 1", n)
	}
	if !slices.Contains(pooled, info.ID) {
		t.Errorf("created %s, not one of the pooled %v", info.ID, pooled)
	}
	if info.Status != StatusRunning || info.SnapshotTag != "warm" || info.ExpiresAt.Sub(info.CreatedAt) != time.Minute {
		t.Errorf("info = %+v", info)
	}
	if rec := e.row(t, info.ID); rec.Status != StatusRunning || rec.TokenHash != hashToken(info.Token) {
		t.Errorf("handed-out record = %+v", rec)
	}
	if got := e.exec(t, info.ID, info.Token, "echo pooled"); got != "pooled\n" {
		t.Errorf("exec = %q", got)
	}
	waitFor(t, "the pool to refill", func() bool { return poolReady() == 2 })
	if n := e.rt.Restores(); n != 3 {
		t.Errorf("%d restores, want 3", n)
	}

	// Deleting the snapshot destroys its pool.
	wantErr(t, e.svc.DeleteSnapshot(ctx, "warm"), ErrConflict)
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSnapshot(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 {
		t.Errorf("after DeleteSnapshot: runtime %v, store %v", e.rt.IDs(), e.rows(t))
	}
}

// A refill that fails is retried without waiting for another spawn.
func TestWarmPoolRetriesFailedRefill(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.PoolMemoryMiB = 4 * testLimits.DefaultMemoryMiB
		c.PoolRetry = 50 * time.Millisecond
	})
	e.rt.FailNthRestore(1, errors.New("injected restore failure"))
	e.build(t, BuildOptions{Tag: "warm", PoolSize: 2})
	waitFor(t, "the pool to fill after a failed refill", func() bool {
		s, _ := e.svc.Snapshot(context.Background(), "warm")
		return s.PoolReady == 2
	})
}

func TestPoolMemoryBudget(t *testing.T) {
	const mem = 128
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 3 * mem })
	e.build(t, BuildOptions{Tag: "p1", MemoryMiB: mem, PoolSize: 2})
	e.build(t, BuildOptions{Tag: "p2", MemoryMiB: mem, PoolSize: 2})

	settled := func() bool {
		e.svc.mu.Lock()
		defer e.svc.mu.Unlock()
		n := 0
		for _, sn := range e.svc.snapshots {
			if sn.filling > 0 {
				return false
			}
			n += len(sn.pool)
		}
		return n == 3
	}
	waitFor(t, "three pooled sandboxes", settled)
	// The filler is idle and has nothing left that fits.
	if sn := e.svc.nextToFill(); sn != nil {
		t.Errorf("nextToFill picked %s past the budget", sn.rec.Tag)
	}
	if got := e.rt.IDs(); len(got) != 3 {
		t.Errorf("runtime holds %d sandboxes, want 3", len(got))
	}
	p1, _ := e.svc.Snapshot(context.Background(), "p1")
	p2, _ := e.svc.Snapshot(context.Background(), "p2")
	if p1.PoolReady+p2.PoolReady != 3 || p1.PoolReady == 0 || p2.PoolReady == 0 {
		t.Errorf("pools hold %d and %d, want 3 in all, some in each", p1.PoolReady, p2.PoolReady)
	}
}
