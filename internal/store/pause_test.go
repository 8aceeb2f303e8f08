package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestPauseStateAndCheckpoints(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.UnixMilli(time.Now().UnixMilli())
	sb := Sandbox{ID: "sb-1", Status: "running", Backend: "gvisor", Image: "img", CPUs: 1, MemoryMiB: 256, TokenHash: "h",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Lifecycle: Lifecycle{AutoResume: true, OnExpiry: "pause"}}
	if err := s.PutSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	l := sb.Lifecycle
	l.PausedAt, l.PausedLeft, l.PausedBytes = now, 42*time.Minute, 1234
	if err := s.SetPaused(ctx, "sb-1", "paused", l, sb.ExpiresAt); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPaused(ctx, "sb-2", "paused", l, sb.ExpiresAt); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetPaused of a missing sandbox: %v", err)
	}
	recs, err := s.Sandboxes(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("Sandboxes: %v, %v", recs, err)
	}
	if got := recs[0]; got.Status != "paused" || got.Lifecycle != l {
		t.Fatalf("read back %+v, want status paused and %+v", got, l)
	}

	c := Checkpoint{SandboxID: "sb-1", Name: "c1", SizeBytes: 10, CreatedAt: now}
	if err := s.PutCheckpoint(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, c); !errors.Is(err, ErrExists) {
		t.Fatalf("a second c1: %v, want ErrExists", err)
	}
	cs, err := s.Checkpoints(ctx)
	if err != nil || len(cs["sb-1"]) != 1 || cs["sb-1"][0] != c {
		t.Fatalf("Checkpoints: %+v, %v", cs, err)
	}
	if err := s.DeleteSandbox(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if cs, _ := s.Checkpoints(ctx); len(cs) != 0 {
		t.Fatalf("checkpoints outlived their sandbox: %+v", cs)
	}
}
