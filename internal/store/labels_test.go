package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestMetaRoundTrip: labels, the default user, env and cwd go with a sandbox's row
// and a snapshot's, through an upsert and a reopen.
func TestMetaRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	meta := Meta{LabelsJSON: `{"team":"a"}`, User: "user", EnvJSON: `["A=1"]`, Cwd: "/srv"}
	now := time.UnixMilli(time.Now().UnixMilli())
	sb := Sandbox{ID: "sb-1", Status: "creating", Backend: "gvisor", Image: "img", CPUs: 1, MemoryMiB: 512,
		TokenHash: "h", CreatedAt: now, ExpiresAt: now, Meta: meta}
	if err := s.PutSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.Status = "running"
	if err := s.Commit(ctx, []Sandbox{sb}, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSnapshot(ctx, Snapshot{Tag: "t", Meta: meta}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sbs, err := s.Sandboxes(ctx)
	if err != nil || len(sbs) != 1 || sbs[0].Meta != meta || sbs[0].Status != "running" {
		t.Errorf("Sandboxes = %+v, %v", sbs, err)
	}
	sns, err := s.Snapshots(ctx)
	if err != nil || len(sns) != 1 || sns[0].Meta != meta {
		t.Errorf("Snapshots = %+v, %v", sns, err)
	}
}
