package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// abandonMigration starts a live checkpoint's migration of VM id as the
// runtime does and walks away from it once it reaches state, as a
// daemon SIGKILLed there would.
func abandonMigration(t *testing.T, r *Runtime, id string, pauseBeforeSwitchover bool, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := dialQMP(ctx, r.vmDir(id).qmpSock())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	out, err := os.Create(filepath.Join(t.TempDir(), "state.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	caps := map[string]bool{"pause-before-switchover": pauseBeforeSwitchover, "events": true}
	if err := startMigration(ctx, q, out, caps); err != nil {
		t.Fatal(err)
	}
	if err := awaitMigration(ctx, q, state); err != nil {
		t.Fatal(err)
	}
}

// TestSettleAbandonedCheckpoint: a VM a dead daemon's checkpoint left
// stopped at its switch-over runs on at its next connection; one left
// stopped after the switch-over is reported exited rather than hang.
func TestSettleAbandonedCheckpoint(t *testing.T) {
	r, files := vmRuntime(t)
	ctx := context.Background()
	for _, id := range []string{"left", "done"} {
		if err := r.Start(ctx, runtime.Spec{ID: id, ImageFiles: files, CPUs: 1, MemoryMiB: 256}); err != nil {
			t.Fatal(err)
		}
		agent(t, r, id, 90*time.Second).Close()
	}

	abandonMigration(t, r, "left", true, "pre-switchover")
	c := agent(t, r, "left", 30*time.Second)
	defer c.Close()
	if got := sh(t, c, "echo on"); got != "on" {
		t.Errorf("the settled VM answered %q", got)
	}

	abandonMigration(t, r, "done", false, "completed")
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.Dial(dctx, "done"); !errors.Is(err, runtime.ErrExited) {
		t.Errorf("dial of a VM stopped after its switch-over: %v, want ErrExited", err)
	}
}
