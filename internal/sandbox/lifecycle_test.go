package sandbox

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
)

func TestReaperDestroysExpired(t *testing.T) {
	e := newEnv(t)
	short := e.createOne(t, CreateOptions{TTL: 300 * time.Millisecond})
	long := e.createOne(t, CreateOptions{})
	if _, err := e.svc.Open(context.Background(), short.ID, short.Token); err != nil {
		t.Fatalf("open before expiry: %v", err)
	}
	waitFor(t, "the expired sandbox to be reaped", func() bool {
		return !slices.Contains(e.rt.IDs(), short.ID) && !slices.Contains(e.rows(t), short.ID)
	})
	_, err := e.svc.Open(context.Background(), short.ID, short.Token)
	wantErr(t, err, ErrNotFound)
	if got := ids(e.svc.List(context.Background())); !slices.Equal(got, []string{long.ID}) {
		t.Errorf("List = %v, want only %s", got, long.ID)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{long.ID}) {
		t.Errorf("runtime holds %v, want only %s", got, long.ID)
	}
	if n := e.svc.Stats().Expired.Load(); n != 1 {
		t.Errorf("Stats().Expired = %d, want 1", n)
	}
}

func TestRecover(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	alive := e.createOne(t, CreateOptions{})
	lost := e.createOne(t, CreateOptions{}) // running, but its agent stops answering
	e.rt.SetDeaf(lost.ID)

	now := time.Now()
	put := func(id, status, backend string, expires time.Time, boot bool) {
		t.Helper()
		rec := store.Sandbox{ID: id, Status: status, Backend: backend, Image: "default-0001", CPUs: 1,
			MemoryMiB: 256, TokenHash: hashToken("t-" + id), CreatedAt: now, ExpiresAt: expires}
		if err := e.st.PutSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if boot {
			e.rt.Boot(t, id)
		}
	}
	put("sb-creating0000", StatusCreating, "fake", now.Add(time.Hour), true)
	put("sb-stopping0000", StatusStopping, "fake", now.Add(time.Hour), true)
	put("sb-pooled000000", StatusPooled, "fake", now.Add(time.Hour), true)
	put("sb-expired00000", StatusRunning, "fake", now.Add(-time.Second), true)
	put("sb-otherbackend", StatusRunning, "qemu", now.Add(time.Hour), false)
	put("sb-gone00000000", StatusRunning, "fake", now.Add(time.Hour), false) // runtime holds nothing
	put("sb-rollback0000", StatusResuming, "fake", now.Add(time.Hour), true) // a rollback under way
	e.rt.Boot(t, "sb-orphan000000")                                          // runtime only

	e.restart(t)

	// Sandboxes that were running and are no longer are listed as dead,
	// with why; everything else that is not the live one is gone.
	status := map[string]string{}
	for _, i := range e.svc.List(context.Background()) {
		status[i.ID] = i.Status + "/" + i.DeadReason
	}
	want := map[string]string{alive.ID: "running/", lost.ID: "dead/unreachable", "sb-gone00000000": "dead/exited",
		"sb-rollback0000": "dead/exited"}
	if !maps.Equal(status, want) {
		t.Errorf("List after recover = %v, want %v", status, want)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{alive.ID}) {
		t.Errorf("runtime holds %v, want [%s]", got, alive.ID)
	}
	if got, want := e.rows(t), slices.Sorted(maps.Keys(want)); !slices.Equal(got, want) {
		t.Errorf("store holds %v, want %v", got, want)
	}
	for _, id := range []string{"sb-creating0000", "sb-stopping0000", "sb-pooled000000", "sb-expired00000", "sb-orphan000000", lost.ID} {
		if !e.rt.Destroyed(id) {
			t.Errorf("%s was not destroyed", id)
		}
	}
	// The re-attached sandbox keeps its token and answers.
	if got := e.exec(t, alive.ID, alive.Token, "echo back"); got != "back\n" {
		t.Errorf("exec after recover = %q", got)
	}
	_, err := e.svc.Open(context.Background(), alive.ID, lost.Token)
	wantErr(t, err, ErrForbidden)
	_, err = e.svc.Open(context.Background(), lost.ID, lost.Token)
	wantErr(t, err, ErrDead)
}

func TestClose(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 1024 })
	e.build(t, BuildOptions{Tag: "base", PoolSize: 2})
	waitFor(t, "the pool to fill", func() bool { s, _ := e.svc.Snapshot(context.Background(), "base"); return s.PoolReady == 2 })
	info := e.createOne(t, CreateOptions{})
	waitFor(t, "the pool to refill", func() bool { return len(e.rt.IDs()) == 3 })

	e.svc.Close()
	// Sandboxes in use keep running for the next daemon; pooled ones go.
	if got := e.rt.IDs(); !slices.Equal(got, []string{info.ID}) {
		t.Errorf("after Close the runtime holds %v, want [%s]", got, info.ID)
	}
	if got := e.rows(t); !slices.Equal(got, []string{info.ID}) {
		t.Errorf("after Close the store holds %v, want [%s]", got, info.ID)
	}
	e.start(t)
	if got := e.exec(t, info.ID, info.Token, "echo still"); got != "still\n" {
		t.Errorf("exec after restart = %q", got)
	}
}
