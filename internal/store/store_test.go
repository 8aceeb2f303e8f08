package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSandboxRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(time.Now().UnixMilli())
	want := Sandbox{ID: "sb-1", Status: "running", Backend: "gvisor", Image: "default-abc", CPUs: 1,
		MemoryMiB: 512, Limits: Limits{DiskMiB: 2048, Pids: 1024, OpenFiles: 4096}, TokenHash: "h",
		CreatedAt: now, ExpiresAt: now.Add(time.Minute), NetworkJSON: `{"allow_cidrs":["192.0.2.0/24"]}`, Tenant: "acme"}
	if err := s.PutSandbox(ctx, want); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	if err := s.SetExpiry(ctx, "sb-1", later); err != nil {
		t.Fatal(err)
	}
	want.ExpiresAt = later
	if err := s.SetNetwork(ctx, "sb-1", `{"presets":["pypi"]}`); err != nil {
		t.Fatal(err)
	}
	want.NetworkJSON = `{"presets":["pypi"]}`
	if err := s.SetNetwork(ctx, "missing", "{}"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetNetwork(missing) = %v, want ErrNotFound", err)
	}
	if err := s.SetStatus(ctx, "missing", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetStatus(missing) = %v, want ErrNotFound", err)
	}
	s.Close()

	// Reopen: the record survives.
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Sandboxes = %+v, want [%+v]", got, want)
	}
	if err := s.DeleteSandbox(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Sandboxes(ctx); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := Snapshot{Tag: "t1", Parent: "base", BranchedFrom: "sb-1", Depth: 2, Backend: "gvisor", Image: "img",
		CPUs: 1, MemoryMiB: 512, Limits: Limits{DiskMiB: 512, Pids: 256, OpenFiles: 1024}, PoolSize: 2,
		SizeBytes: 1 << 20, CreatedAt: time.UnixMilli(time.Now().UnixMilli()),
		RuntimeVersion: "runsc version x", TokenHash: "h", Pending: true, NetworkJSON: `{"allow_domains":["example.org"]}`, Tenant: "acme"}
	if err := s.PutSnapshot(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSnapshot(ctx, want); err == nil {
		t.Fatal("a second snapshot with the same tag was accepted")
	}
	got, err := s.Snapshots(ctx)
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("Snapshots = %+v, %v; want [%+v]", got, err, want)
	}
	if err := s.DeleteSnapshot(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Snapshots(ctx); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}

// A database from before runtime_version, token_hash, pending, the deaths,
// the limits and the network existed opens and gains them; its old rows read as zero
// limits.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER TABLE snapshots DROP COLUMN runtime_version`,
		`ALTER TABLE snapshots DROP COLUMN token_hash`, `ALTER TABLE snapshots DROP COLUMN pending`,
		`ALTER TABLE snapshots DROP COLUMN disk_mib`, `ALTER TABLE snapshots DROP COLUMN pids`, `ALTER TABLE snapshots DROP COLUMN open_files`,
		`ALTER TABLE sandboxes DROP COLUMN disk_mib`, `ALTER TABLE sandboxes DROP COLUMN pids`, `ALTER TABLE sandboxes DROP COLUMN open_files`,
		`ALTER TABLE sandboxes DROP COLUMN network`, `ALTER TABLE snapshots DROP COLUMN network`, `DROP TABLE ports`,
		`ALTER TABLE sandboxes DROP COLUMN tenant`, `ALTER TABLE snapshots DROP COLUMN tenant`, `ALTER TABLE templates DROP COLUMN tenant`,
		`INSERT INTO templates (name, base, image, digest, key, steps, build_ms, created_at)
			VALUES ('oldt', 'b', 'img', 'd', 'k', '[]', 0, 0)`,
		`INSERT INTO sandboxes (id, status, backend, image, cpus, memory_mib, token_hash, created_at, expires_at)
			VALUES ('old', 'running', 'gvisor', 'img', 1, 512, 'h', 0, 0)`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen an old database: %v", err)
	}
	defer s.Close()
	if err := s.PutSnapshot(ctx, Snapshot{Tag: "t", RuntimeVersion: "v", TokenHash: "h", Limits: Limits{Pids: 7}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Snapshots(ctx)
	if err != nil || len(got) != 1 || got[0].RuntimeVersion != "v" || got[0].TokenHash != "h" || got[0].Pids != 7 {
		t.Fatalf("Snapshots = %+v, %v", got, err)
	}
	sbs, err := s.Sandboxes(ctx)
	if err != nil || len(sbs) != 1 || sbs[0].ID != "old" || sbs[0].Limits != (Limits{}) || sbs[0].NetworkJSON != "" ||
		sbs[0].Tenant != "default" {
		t.Fatalf("Sandboxes = %+v, %v", sbs, err)
	}
	// Everything made before tenants is the default tenant's.
	if tm, ok, err := s.GetTemplate(ctx, "oldt"); err != nil || !ok || tm.Tenant != "default" {
		t.Fatalf("GetTemplate(oldt) = %+v, %v, %v", tm, ok, err)
	}
	if got[0].Tenant != "default" {
		t.Fatalf("a snapshot written without a tenant is %q's", got[0].Tenant)
	}
}

// Commit writes a call's sandboxes and settles its snapshot together, or
// changes nothing.
func TestCommit(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.UnixMilli(time.Now().UnixMilli())
	rec := func(id, status string) Sandbox {
		return Sandbox{ID: id, Status: status, Backend: "gvisor", Image: "img", CPUs: 1, MemoryMiB: 256,
			TokenHash: "h-" + id, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	}
	for _, id := range []string{"sb-1", "sb-2"} {
		if err := s.PutSandbox(ctx, rec(id, "creating")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSnapshot(ctx, Snapshot{Tag: "br", Pending: true}); err != nil {
		t.Fatal(err)
	}
	// A snapshot that is not there fails the whole commit.
	if err := s.Commit(ctx, []Sandbox{rec("sb-1", "running")}, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Commit with a missing snapshot = %v, want ErrNotFound", err)
	}
	if got, _ := s.Sandboxes(ctx); got[0].Status != "creating" {
		t.Fatalf("a failed commit wrote %+v", got[0])
	}
	if err := s.Commit(ctx, []Sandbox{rec("sb-1", "running"), rec("sb-2", "running")}, "br"); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Sandboxes(ctx)
	if len(got) != 2 || got[0].Status != "running" || got[1].Status != "running" {
		t.Fatalf("after commit: %+v", got)
	}
	if snaps, _ := s.Snapshots(ctx); len(snaps) != 1 || snaps[0].Pending {
		t.Fatalf("after commit: %+v", snaps)
	}
}

func TestDatabaseIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cove.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
}
