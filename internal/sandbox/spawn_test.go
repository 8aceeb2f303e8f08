package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
)

func TestCreate(t *testing.T) {
	tests := []struct {
		name                 string
		opts                 CreateOptions
		wantN                int
		wantImage, wantRoot  string
		wantCPUs, wantMemory int
		wantTTL              time.Duration
	}{
		{name: "defaults", opts: CreateOptions{},
			wantN: 1, wantImage: "default-0001", wantRoot: "fake-rootfs/default-0001",
			wantCPUs: 1, wantMemory: 256, wantTTL: testLimits.DefaultTTL},
		{name: "n 0 means 1", opts: CreateOptions{N: 0, TTL: time.Minute},
			wantN: 1, wantImage: "default-0001", wantRoot: "fake-rootfs/default-0001",
			wantCPUs: 1, wantMemory: 256, wantTTL: time.Minute},
		{name: "explicit", opts: CreateOptions{Image: "other", N: 3, TTL: time.Hour, CPUs: 4, MemoryMiB: 64},
			wantN: 3, wantImage: "other-0002", wantRoot: "fake-rootfs/other-0002",
			wantCPUs: 4, wantMemory: 64, wantTTL: time.Hour},
		{name: "by image id", opts: CreateOptions{Image: "other-0002", MemoryMiB: 2048},
			wantN: 1, wantImage: "other-0002", wantRoot: "fake-rootfs/other-0002",
			wantCPUs: 1, wantMemory: 2048, wantTTL: testLimits.DefaultTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			infos, err := e.svc.Create(testCtx(t), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != tc.wantN {
				t.Fatalf("made %d sandboxes, want %d", len(infos), tc.wantN)
			}
			tokens := map[string]bool{}
			for _, info := range infos {
				if info.Status != StatusRunning || info.Backend != "fake" || info.Image != tc.wantImage ||
					info.CPUs != tc.wantCPUs || info.MemoryMiB != tc.wantMemory || info.SnapshotTag != "" {
					t.Errorf("info = %+v", info)
				}
				if got := info.ExpiresAt.Sub(info.CreatedAt); got != tc.wantTTL {
					t.Errorf("lifetime = %s, want %s", got, tc.wantTTL)
				}
				if len(info.Token) != 48 || tokens[info.Token] {
					t.Errorf("token %q is not a fresh 24-byte hex token", info.Token)
				}
				tokens[info.Token] = true

				spec := e.rt.Spec(info.ID)
				if spec.Rootfs != tc.wantRoot || spec.CPUs != tc.wantCPUs || spec.MemoryMiB != tc.wantMemory || spec.Hostname != info.ID {
					t.Errorf("runtime spec = %+v", spec)
				}
				rec := e.row(t, info.ID)
				if rec.Status != StatusRunning || rec.TokenHash != hashToken(info.Token) {
					t.Errorf("store record = %+v; want running with the token's hash", rec)
				}
				if strings.Contains(rec.TokenHash, info.Token) {
					t.Error("the store holds the token itself")
				}
				if got, err := e.svc.Get(context.Background(), info.ID); err != nil || got.Token != "" || got.ID != info.ID {
					t.Errorf("Get = %+v, %v; want the sandbox without its token", got, err)
				}
			}
			if got, want := ids(e.svc.List(context.Background())), ids(infos); !slices.Equal(got, want) {
				t.Errorf("List = %v, want %v", got, want)
			}
			if got := e.svc.Stats().Created.Load(); got != int64(tc.wantN) {
				t.Errorf("Stats().Created = %d, want %d", got, tc.wantN)
			}
		})
	}
}

func TestCreateInvalid(t *testing.T) {
	tests := []struct {
		name string
		opts CreateOptions
		want error
	}{
		{"n negative", CreateOptions{N: -1}, ErrInvalid},
		{"n over max", CreateOptions{N: MaxN + 1}, ErrInvalid},
		{"ttl negative", CreateOptions{TTL: -time.Second}, ErrInvalid},
		{"ttl over max", CreateOptions{TTL: testLimits.MaxTTL + time.Second}, ErrInvalid},
		{"cpus negative", CreateOptions{CPUs: -1}, ErrInvalid},
		{"cpus over max", CreateOptions{CPUs: testLimits.MaxCPUs + 1}, ErrInvalid},
		{"memory under min", CreateOptions{MemoryMiB: MinMemoryMiB - 1}, ErrInvalid},
		{"memory negative", CreateOptions{MemoryMiB: -1}, ErrInvalid},
		{"memory over max", CreateOptions{MemoryMiB: testLimits.MaxMemoryMiB + 1}, ErrInvalid},
		{"disk negative", CreateOptions{DiskMiB: -1}, ErrInvalid},
		{"disk under min", CreateOptions{DiskMiB: MinDiskMiB - 1}, ErrInvalid},
		{"disk over max", CreateOptions{DiskMiB: testLimits.MaxDiskMiB + 1}, ErrInvalid},
		{"pids negative", CreateOptions{Pids: -1}, ErrInvalid},
		{"pids under min", CreateOptions{Pids: MinPids - 1}, ErrInvalid},
		{"pids over max", CreateOptions{Pids: testLimits.MaxPids + 1}, ErrInvalid},
		{"unknown image", CreateOptions{Image: "nope"}, ErrNotFound},
		{"unknown snapshot", CreateOptions{SnapshotTag: "nope"}, ErrNoSnapshot},
		{"over the sandbox limit", CreateOptions{N: testLimits.MaxSandboxes + 1}, ErrLimit},
	}
	e := newEnv(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			infos, err := e.svc.Create(testCtx(t), tc.opts)
			wantErr(t, err, tc.want)
			if infos != nil {
				t.Errorf("Create returned %v with its error", infos)
			}
			if e.rt.Starts() != 0 || len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 || e.svc.Count() != 0 {
				t.Errorf("a refused create left something: %d starts, runtime %v, store %v, %d live",
					e.rt.Starts(), e.rt.IDs(), e.rows(t), e.svc.Count())
			}
		})
	}
}

// A guest that dies while it boots is booted once more; one that dies
// twice fails the call at once, not after the start timeout.
func TestCreateBootsDeadGuestAgain(t *testing.T) {
	tests := []struct {
		name       string
		deaths     int
		wantStarts int
		wantErr    error
	}{
		{name: "dies once", deaths: 1, wantStarts: 2},
		{name: "dies twice", deaths: 2, wantStarts: 2, wantErr: ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.StartTimeout = time.Minute })
			for i := 1; i <= tc.deaths; i++ {
				e.rt.DieNthStart(i)
			}
			t0 := time.Now()
			infos, err := e.svc.Create(testCtx(t), CreateOptions{N: 1})
			if d := time.Since(t0); d > 30*time.Second {
				t.Errorf("Create took %v: it waited for a dead guest", d)
			}
			if n := e.rt.Starts(); n != tc.wantStarts {
				t.Errorf("%d starts, want %d", n, tc.wantStarts)
			}
			if tc.wantErr != nil {
				wantErr(t, err, tc.wantErr)
				if !errors.Is(err, runtime.ErrExited) {
					t.Errorf("error %v does not say the guest exited", err)
				}
				if got := e.rt.IDs(); len(got) != 0 {
					t.Errorf("runtime still holds %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := e.rt.IDs(); len(got) != 1 || got[0] != infos[0].ID {
				t.Errorf("runtime holds %v, want just %s", got, infos[0].ID)
			}
		})
	}
}

// TestCreateAllOrNothing: when one sandbox of a batch fails to start, the
// others are destroyed and the call fails.
func TestCreateAllOrNothing(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		failAt int  // 1-based Start call
		deaf   bool // the sandbox starts but its agent never answers
		want   error
	}{
		{name: "first start fails", failAt: 1, want: boom},
		{name: "second start fails", failAt: 2, want: boom},
		{name: "third start fails", failAt: 3, want: boom},
		{name: "second agent never answers", failAt: 2, deaf: true, want: ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.StartTimeout = 200 * time.Millisecond })
			if tc.deaf {
				e.rt.DeafNthStart(tc.failAt)
			} else {
				e.rt.FailNthStart(tc.failAt, boom)
			}
			infos, err := e.svc.Create(testCtx(t), CreateOptions{N: 3})
			wantErr(t, err, tc.want)
			if infos != nil {
				t.Errorf("Create returned %v with its error", infos)
			}
			if n := e.rt.Starts(); n != 3 {
				t.Errorf("%d starts, want 3", n)
			}
			if got := e.rt.IDs(); len(got) != 0 {
				t.Errorf("runtime still holds %v", got)
			}
			if got := e.rows(t); len(got) != 0 {
				t.Errorf("store still holds %v", got)
			}
			if n := e.svc.Count(); n != 0 {
				t.Errorf("%d sandboxes live", n)
			}
			if n := e.svc.Stats().Failures.Load(); n != 1 {
				t.Errorf("Stats().Failures = %d, want 1", n)
			}
			// The reservation is released: the full limit is usable again.
			if _, err := e.svc.Create(testCtx(t), CreateOptions{N: testLimits.MaxSandboxes}); err != nil {
				t.Errorf("create after a failed create: %v", err)
			}
		})
	}
}

// TestCreateCommitsAtOnce: a create's sandboxes are neither listed nor
// recorded as running until all have started, so a daemon that dies in
// the middle leaves none of them to a restart.
func TestCreateCommitsAtOnce(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StartTimeout = 2 * time.Second })
	e.rt.DeafNthStart(2) // the first answers; the second keeps the call open
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Create(context.Background(), CreateOptions{N: 2})
		done <- err
	}()
	// Both rows exist once the second start is under way (the two starts
	// run in parallel, so the second row may trail the first answer).
	var recs []store.Sandbox
	waitFor(t, "the first sandbox to answer and the second to start", func() bool {
		var err error
		recs, err = e.st.Sandboxes(testCtx(t))
		return err == nil && len(recs) == 2 && e.svc.Stats().Created.Load() == 1
	})
	if got := e.svc.List(context.Background()); len(got) != 0 {
		t.Errorf("listed before the call answered: %+v", got)
	}
	for _, r := range recs {
		if r.Status != StatusCreating {
			t.Errorf("row %s is %s before its call answered, want %s", r.ID, r.Status, StatusCreating)
		}
	}
	// A daemon started now (the first one killed) destroys both.
	next := New(e.cfg)
	if err := next.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(next.Close)
	<-next.Recovered() // the checks and teardowns run in the background
	if got := e.rt.IDs(); len(got) != 0 {
		t.Errorf("after recovery the runtime holds %v", got)
	}
	if got := next.List(context.Background()); len(got) != 0 {
		t.Errorf("after recovery: %+v", got)
	}
	if err := <-done; err == nil {
		t.Error("the interrupted create succeeded")
	}
}

func TestCreateLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxSandboxes = 2 })
	ctx := testCtx(t)
	_, err := e.svc.Create(ctx, CreateOptions{N: 3})
	wantErr(t, err, ErrLimit)
	if n := e.rt.Starts(); n != 0 {
		t.Fatalf("%d starts after a refused create", n)
	}
	infos, err := e.svc.Create(ctx, CreateOptions{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Create(ctx, CreateOptions{})
	wantErr(t, err, ErrLimit)
	if err := e.svc.Delete(ctx, infos[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, CreateOptions{}); err != nil {
		t.Fatalf("create after freeing a slot: %v", err)
	}
}

// TestCreateLimitCountsStarting: sandboxes still starting count against
// the limit.
func TestCreateLimitCountsStarting(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxSandboxes = 3 })
	release := e.rt.HoldStarts()
	t.Cleanup(release)
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Create(context.Background(), CreateOptions{N: 2})
		done <- err
	}()
	waitFor(t, "both starts to begin", func() bool { return e.rt.Starts() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // held too if admitted
	defer cancel()
	_, err := e.svc.Create(ctx, CreateOptions{N: 2})
	wantErr(t, err, ErrLimit)
	release()
	if err := <-done; err != nil {
		t.Fatalf("held create: %v", err)
	}
	if _, err := e.svc.Create(testCtx(t), CreateOptions{}); err != nil {
		t.Errorf("create within the limit: %v", err)
	}
}

func TestSpawnFromSnapshot(t *testing.T) {
	e := newEnv(t)
	e.build(t, BuildOptions{Tag: "base", CPUs: 2, MemoryMiB: 128})
	startsBefore := e.rt.Starts()
	infos, err := e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "base", N: 2, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if e.rt.Starts() != startsBefore || e.rt.Restores() != 2 {
		t.Errorf("%d starts and %d restores, want 0 and 2", e.rt.Starts()-startsBefore, e.rt.Restores())
	}
	dir := filepath.Join(e.cfg.SnapshotDir, "base")
	for _, info := range infos {
		if info.SnapshotTag != "base" || info.Image != "default-0001" || info.CPUs != 2 || info.MemoryMiB != 128 || info.Token == "" {
			t.Errorf("info = %+v", info)
		}
		if got := e.rt.RestoredFrom(info.ID); got != dir {
			t.Errorf("%s restored from %q, want %q", info.ID, got, dir)
		}
		if got := e.rt.RestoredCalls(info.ID); !slices.Equal(got, []string{info.ID}) {
			t.Errorf("agent of %s told Restored(%v), want once with its id", info.ID, got)
		}
		if spec := e.rt.Spec(info.ID); spec.Rootfs != "fake-rootfs/default-0001" || spec.Kernel != "fake-vm/default-0001/vmlinux" || spec.CPUs != 2 || spec.MemoryMiB != 128 {
			t.Errorf("restore spec = %+v", spec)
		}
		if rec := e.row(t, info.ID); rec.SnapshotTag != "base" || rec.Status != StatusRunning {
			t.Errorf("store record = %+v", rec)
		}
		if got := e.exec(t, info.ID, info.Token, "echo child"); got != "child\n" {
			t.Errorf("exec = %q", got)
		}
	}
	if sn, _ := e.svc.Snapshot(context.Background(), "base"); sn.Children != 2 {
		t.Errorf("Children = %d, want 2", sn.Children)
	}

	// A snapshot's sandboxes run with its cpus and memory.
	for _, o := range []CreateOptions{
		{SnapshotTag: "base", CPUs: 1},
		{SnapshotTag: "base", MemoryMiB: 256},
	} {
		_, err := e.svc.Create(testCtx(t), o)
		wantErr(t, err, ErrInvalid)
	}
	if _, err := e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "base", CPUs: 2, MemoryMiB: 128}); err != nil {
		t.Errorf("spawn with the snapshot's own cpus and memory: %v", err)
	}

	// A failed restore leaves nothing.
	e.rt.FailNthRestore(2, errors.New("boom"))
	before := e.rt.IDs()
	_, err = e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "base", N: 3})
	if err == nil {
		t.Fatal("create with a failing restore succeeded")
	}
	if got := e.rt.IDs(); !slices.Equal(got, before) {
		t.Errorf("runtime holds %v after a failed spawn, want %v", got, before)
	}
}
