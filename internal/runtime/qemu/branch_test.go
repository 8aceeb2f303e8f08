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
