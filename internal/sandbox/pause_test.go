package sandbox

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestPauseResumeKeepsIdentity(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{TTL: 10 * time.Minute, Labels: map[string]string{"a": "b"}})
	p, err := e.svc.Pause(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != StatusPaused || p.PausedAt.IsZero() || p.Remaining <= 9*time.Minute {
		t.Fatalf("paused info = %+v", p)
	}
	if ids := e.rt.IDs(); len(ids) != 0 {
		t.Fatalf("the runtime still holds %v", ids)
	}
	if _, err := os.Stat(e.svc.pausedDir(info.ID)); err != nil {
		t.Fatalf("no saved state: %v", err)
	}
	_, err = e.svc.Open(context.Background(), info.ID, info.Token)
	wantErr(t, err, ErrPaused)
	wantErr(t, err, ErrConflict)
	_, err = e.svc.Pause(ctx, info.ID)
	wantErr(t, err, ErrPaused)

	e.restart(t) // a paused sandbox survives the daemon
	if got, _ := e.svc.Get(context.Background(), info.ID); got.Status != StatusPaused {
		t.Fatalf("after restart: status %q", got.Status)
	}
	r, err := e.svc.Resume(ctx, info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusRunning || r.Labels["a"] != "b" || r.Remaining != 0 {
		t.Fatalf("resumed info = %+v", r)
	}
	if left := time.Until(r.ExpiresAt); left < 9*time.Minute || left > 10*time.Minute {
		t.Fatalf("remaining lifetime after resume = %s", left)
	}
	e.exec(t, info.ID, info.Token, "true")
	if _, err := os.Stat(e.svc.pausedDir(info.ID)); !os.IsNotExist(err) {
		t.Fatalf("saved state left after resume: %v", err)
	}
	_, err = e.svc.Resume(ctx, info.ID, 0)
	wantErr(t, err, ErrConflict)
}

func TestDeletePausedRemovesItsFiles(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	if _, err := e.open(t, info.ID, info.Token).Checkpoint(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.svc.pausedDir(info.ID), e.svc.checkpointRoot(info.ID)} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", d, err)
		}
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Errorf("rows left: %v", rows)
	}
}

func TestAutoResume(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{AutoResume: true})
	if _, err := e.svc.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.OpenAuto(ctx, info.ID, "wrong"); err == nil {
		t.Fatal("a wrong token resumed the sandbox")
	}
	sb, err := e.svc.OpenAuto(ctx, info.ID, info.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, ExecRequest{Shell: "true"}); err != nil {
		t.Fatal(err)
	}
}

func TestOnExpiryPause(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	_, err := e.svc.Create(ctx, CreateOptions{OnExpiry: "hibernate"})
	wantErr(t, err, ErrInvalid)
	info := e.createOne(t, CreateOptions{TTL: time.Second, OnExpiry: apitype.OnExpiryPause})
	waitFor(t, "the pause at expiry", func() bool {
		got, err := e.svc.Get(context.Background(), info.ID)
		return err == nil && got.Status == StatusPaused
	})
	r, err := e.svc.Resume(ctx, info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(r.ExpiresAt); left < testLimits.DefaultTTL-time.Minute {
		t.Fatalf("resumed after expiry with %s left, want the default lifetime", left)
	}
}

func TestCheckpointRollbackInput(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)
	c, err := sb.Checkpoint(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	if c.SizeBytes <= 0 {
		t.Errorf("size = %d", c.SizeBytes)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"duplicate", func() error { _, err := sb.Checkpoint(ctx, "base"); return err }, ErrConflict},
		{"bad name", func() error { _, err := sb.Checkpoint(ctx, "../x"); return err }, ErrInvalid},
		{"unknown", func() error { _, err := sb.Rollback(ctx, "nope"); return err }, ErrNotFound},
		{"empty", func() error { _, err := sb.Rollback(ctx, ""); return err }, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.do(), tc.want) })
	}
	for range 2 {
		r, err := sb.Rollback(ctx, "base")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != StatusRunning || r.CheckpointBytes != c.SizeBytes {
			t.Fatalf("after rollback: %+v", r)
		}
		e.exec(t, info.ID, info.Token, "true")
	}
	if got := sb.Checkpoints(); len(got) != 1 || got[0].Name != "base" {
		t.Fatalf("checkpoints = %+v", got)
	}
	e.restart(t)
	sb = e.open(t, info.ID, info.Token)
	if got := sb.Checkpoints(); len(got) != 1 {
		t.Fatalf("checkpoints after restart = %+v", got)
	}
	if _, err := e.svc.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Rollback(ctx, "base")
	wantErr(t, err, ErrPaused)
}

func TestPausedRefusesLifecycleChanges(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	if _, err := e.svc.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Extend(ctx, info.ID, time.Minute)
	wantErr(t, err, ErrPaused)
	_, err = e.svc.Resume(ctx, info.ID, 2*time.Hour)
	wantErr(t, err, ErrInvalid)
	r, err := e.svc.Resume(ctx, info.ID, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(r.ExpiresAt); left < 29*time.Minute {
		t.Fatalf("resumed with ttl 30m: %s left", left)
	}
}

func TestValidOnExpiry(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"", true}, {"kill", true}, {"pause", true}, {"Pause", false}, {"stop", false}} {
		if got := validOnExpiry(tc.v); got != tc.want {
			t.Errorf("validOnExpiry(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestDiskUsageCountsHardLinksOnce(t *testing.T) {
	dir := t.TempDir()
	blob := make([]byte, 1<<20)
	for i := range blob {
		blob[i] = byte(i)
	}
	if err := os.WriteFile(dir+"/a", blob, 0o600); err != nil {
		t.Fatal(err)
	}
	one := diskUsage(dir)
	if one < 1<<20 {
		t.Fatalf("a 1 MiB file takes %d bytes", one)
	}
	if err := os.Link(dir+"/a", dir+"/b"); err != nil {
		t.Fatal(err)
	}
	if got := diskUsage(dir); got != one {
		t.Fatalf("with a hard link: %d bytes, want %d", got, one)
	}
	if got := diskUsage(dir + "/missing"); got != 0 {
		t.Fatalf("a missing directory takes %d bytes", got)
	}
}

func TestRecoverPrunesSavedState(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	if _, err := e.open(t, info.ID, info.Token).Checkpoint(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	root := e.svc.checkpointRoot(info.ID)
	// What a daemon killed midway leaves: a half-written checkpoint, one
	// renamed but not recorded, a resumed sandbox's old state, a stranger's.
	for _, d := range []string{root + "/.tmp-x-1234", root + "/unrecorded", e.svc.pausedDir(info.ID),
		e.svc.pausedDir("sb-gone") + ".tmp-ab", e.svc.checkpointRoot("sb-gone")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.restart(t)
	ents, _ := os.ReadDir(root)
	if len(ents) != 1 || ents[0].Name() != "kept" {
		t.Fatalf("checkpoints left: %v", ents)
	}
	for _, d := range []string{e.svc.cfg.PausedDir, e.svc.cfg.CheckpointDir} {
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			if ent.Name() != info.ID {
				t.Errorf("%s/%s left", d, ent.Name())
			}
		}
	}
	if _, err := os.Stat(e.svc.pausedDir(info.ID)); !os.IsNotExist(err) {
		t.Errorf("a running sandbox's old saved state is left: %v", err)
	}
	if got := e.open(t, info.ID, info.Token).Checkpoints(); len(got) != 1 {
		t.Fatalf("checkpoints = %+v", got)
	}
}

// TestAutoResumeDialPort: a dial to an exposed port of a paused
// auto_resume sandbox resumes it, and the resume is not cut short by the
// dial's own short deadline (the preview proxy gives a dial 2 s; a resume
// on a loaded host may take longer).
func TestAutoResumeDialPort(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e.svc.dialIn = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", l.Addr().String())
	}
	info := e.createOne(t, CreateOptions{AutoResume: true})
	if _, err := e.open(t, info.ID, info.Token).ExposePort(ctx, 8000, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	e.rt.SetRestoreDelay(300 * time.Millisecond)
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	c, err := e.svc.DialPort(dctx, info.ID, 8000)
	if err != nil {
		t.Fatalf("dial a paused auto_resume sandbox's port with a deadline shorter than its resume: %v", err)
	}
	c.Close()
	if got, err := e.svc.Get(ctx, info.ID); err != nil || got.Status != StatusRunning {
		t.Fatalf("after the dial: %+v, %v", got, err)
	}
}
