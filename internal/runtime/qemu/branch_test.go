package qemu

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// TestBranchColdVM branches a cold-booted VM (which owns its RAM file)
// while it runs and restores a child from it.
func TestBranchColdVM(t *testing.T) {
	r, rootfs := vmRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, runtime.Spec{ID: "cold", Rootfs: rootfs, CPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	c := agent(t, r, "cold", 60*time.Second)
	sh(t, c, "echo before > /root/x")
	img := filepath.Join(t.TempDir(), "b")
	pause, err := r.Checkpoint(ctx, "cold", img, true)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, c, "echo source > /root/x") // the old connection survives the branch
	c.Close()
	t0 := time.Now()
	if err := r.Restore(ctx, runtime.Spec{ID: "child", Rootfs: rootfs}, img); err != nil {
		t.Fatal(err)
	}
	c = agent(t, r, "child", 30*time.Second)
	if got := sh(t, c, "cat /root/x"); got != "before" {
		t.Fatalf("child sees %q", got)
	}
	t.Logf("branch pause %v, child restore %v", pause, time.Since(t0))
}

// TestBranchBusyVM branches a VM while the agent answers pings back to
// back, as the service does to measure the pause: the child must come up
// whole (under TCG a live pre-copy once gave children RAM older than their
// device state).
func TestBranchBusyVM(t *testing.T) {
	r, rootfs := vmRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, runtime.Spec{ID: "busy", Rootfs: rootfs, CPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	c := agent(t, r, "busy", 60*time.Second)
	pctx, stop := context.WithCancel(ctx)
	pings := make(chan int)
	go func() {
		n := 0
		for pctx.Err() == nil {
			if _, err := c.Ping(pctx); err != nil {
				break
			}
			n++
			time.Sleep(500 * time.Microsecond)
		}
		pings <- n
	}()
	time.Sleep(200 * time.Millisecond)
	img := filepath.Join(t.TempDir(), "b")
	pause, err := r.Checkpoint(ctx, "busy", img, true)
	stop()
	n := <-pings
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(ctx, runtime.Spec{ID: "busy-child", Rootfs: rootfs}, img); err != nil {
		t.Fatal(err)
	}
	c2 := agent(t, r, "busy-child", 30*time.Second)
	sh(t, c2, "true")
	t.Logf("%d pings during the branch, pause %v", n, pause)
}
