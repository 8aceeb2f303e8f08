package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// waitStatus waits until sandbox id is listed with status (and reason).
func (e *testEnv) waitStatus(t *testing.T, id, status, reason string) Info {
	t.Helper()
	var got Info
	waitFor(t, "sandbox "+id+" to be "+status, func() bool {
		var err error
		got, err = e.svc.Get(context.Background(), id)
		return err == nil && got.Status == status && got.DeadReason == reason
	})
	return got
}

func TestDeadSandbox(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exit   runtime.Exit
		reason string
	}{
		{"exited", runtime.Exit{}, apitype.DeadExited},
		{"oom killed", runtime.Exit{OOMKilled: true}, apitype.DeadOOMKilled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.Limits.MaxSandboxes = 1 })
			ctx := testCtx(t)
			info := e.createOne(t, CreateOptions{})
			sb := e.open(t, info.ID, info.Token)

			e.rt.Kill(info.ID, tc.exit)
			got := e.waitStatus(t, info.ID, StatusDead, tc.reason)
			if got.DiedAt.IsZero() {
				t.Error("a dead sandbox has no time of death")
			}
			// Its resources go at once, its record says it died, and its
			// slot is free.
			waitFor(t, "the runtime to let go", func() bool { return !slices.Contains(e.rt.IDs(), info.ID) })
			if r := e.row(t, info.ID); r.Status != StatusDead {
				t.Errorf("record status %q, want dead", r.Status)
			}
			if n := e.svc.Count(); n != 0 {
				t.Errorf("Count = %d, want 0: a dead sandbox holds no slot", n)
			}
			other := e.createOne(t, CreateOptions{}) // the limit is 1
			if got := ids(e.svc.List(context.Background())); !slices.Equal(got, ids([]Info{info, other})) {
				t.Errorf("List = %v, want the dead one and the new one", got)
			}

			// Calls answer at once that it died, and why; a handle opened
			// before does too.
			_, err := e.svc.Open(context.Background(), info.ID, info.Token)
			wantErr(t, err, ErrDead)
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not say %s", err, tc.reason)
			}
			_, err = sb.Exec(ctx, ExecRequest{Shell: "true"})
			wantErr(t, err, ErrDead)
			_, err = e.svc.Extend(ctx, info.ID, time.Minute)
			wantErr(t, err, ErrDead)
			_, err = sb.Branch(ctx, BranchOptions{})
			wantErr(t, err, ErrDead)
			_, err = e.svc.Open(context.Background(), info.ID, "wrong")
			wantErr(t, err, ErrForbidden) // the token comes first
			if n := e.svc.Stats().Died.Load(); n != 1 {
				t.Errorf("Stats().Died = %d, want 1", n)
			}

			// Deleting it forgets it.
			if err := e.svc.Delete(ctx, info.ID); err != nil {
				t.Fatal(err)
			}
			_, err = e.svc.Get(context.Background(), info.ID)
			wantErr(t, err, ErrNotFound)
			if slices.Contains(e.rows(t), info.ID) {
				t.Error("the dead sandbox's record outlived its deletion")
			}
		})
	}
}

func TestDeadSandboxCallInFlight(t *testing.T) {
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(testCtx(t), ExecRequest{Shell: "sleep 30"})
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	e.rt.Kill(info.ID, runtime.Exit{})
	// The call whose connection broke says the sandbox died, not that its
	// agent is unreachable.
	wantErr(t, <-errc, ErrDead)
}

func TestDeadSandboxReaped(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DeadKeep = 300 * time.Millisecond })
	info := e.createOne(t, CreateOptions{})
	e.rt.Kill(info.ID, runtime.Exit{})
	e.waitStatus(t, info.ID, StatusDead, apitype.DeadExited)
	waitFor(t, "the dead sandbox to be forgotten", func() bool {
		_, err := e.svc.Get(context.Background(), info.ID)
		return errors.Is(err, ErrNotFound) && !slices.Contains(e.rows(t), info.ID)
	})
	if n := e.svc.Stats().Expired.Load(); n != 0 {
		t.Errorf("Stats().Expired = %d: forgetting a dead sandbox is no expiry", n)
	}
}

func TestDeadSandboxSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{})
	e.rt.Kill(info.ID, runtime.Exit{OOMKilled: true})
	before := e.waitStatus(t, info.ID, StatusDead, apitype.DeadOOMKilled)
	e.restart(t)
	after := e.waitStatus(t, info.ID, StatusDead, apitype.DeadOOMKilled)
	if !after.DiedAt.Equal(before.DiedAt.Truncate(time.Millisecond)) {
		t.Errorf("time of death %v after a restart, was %v", after.DiedAt, before.DiedAt)
	}
	_, err := e.svc.Open(context.Background(), info.ID, info.Token)
	wantErr(t, err, ErrDead)
}

func TestDeadWhileDaemonDown(t *testing.T) {
	e := newEnv(t)
	alive := e.createOne(t, CreateOptions{})
	gone := e.createOne(t, CreateOptions{})
	e.svc.Close()
	e.rt.Kill(gone.ID, runtime.Exit{OOMKilled: true})
	e.start(t)
	e.waitStatus(t, gone.ID, StatusDead, apitype.DeadOOMKilled)
	e.waitStatus(t, alive.ID, StatusRunning, "")
	waitFor(t, "the runtime to let go of the dead one", func() bool { return slices.Equal(e.rt.IDs(), []string{alive.ID}) })
	if got := e.exec(t, alive.ID, alive.Token, "echo ok"); got != "ok\n" {
		t.Errorf("exec = %q", got)
	}
}

func TestRecoverInParallel(t *testing.T) {
	e := newEnv(t)
	var infos []Info
	for range 5 {
		infos = append(infos, e.createOne(t, CreateOptions{}))
	}
	e.svc.Close()

	// Every agent is slow to answer the restarted daemon: Recover returns
	// at once, every check is under way together, and calls to the
	// sandboxes being checked are refused with ErrRetry.
	release := e.rt.HoldDials()
	e.begin(t)
	waitFor(t, "every check to dial", func() bool { return e.rt.DialsHeld() == len(infos) })
	if n := e.svc.Recovering(); n != len(infos) {
		t.Errorf("Recovering = %d, want %d", n, len(infos))
	}
	for _, info := range infos {
		got, err := e.svc.Get(context.Background(), info.ID)
		if err != nil || got.Status != StatusRunning {
			t.Errorf("Get(%s) while checked = %+v, %v; want it listed as running", info.ID, got, err)
		}
	}
	_, err := e.svc.Open(context.Background(), infos[0].ID, infos[0].Token)
	wantErr(t, err, ErrRetry)
	wantErr(t, err, ErrUnavailable)
	// A sandbox found dead meanwhile is not held up by the others.
	e.rt.Kill(infos[2].ID, runtime.Exit{})
	e.waitStatus(t, infos[2].ID, StatusDead, apitype.DeadExited)

	release()
	<-e.svc.Recovered()
	if n := e.svc.Recovering(); n != 0 {
		t.Errorf("Recovering = %d after recovery", n)
	}
	for i, info := range infos {
		if i == 2 {
			continue
		}
		if got := e.exec(t, info.ID, info.Token, "echo back"); got != "back\n" {
			t.Errorf("exec in %s after recovery = %q", info.ID, got)
		}
	}
}

func TestDeadWithoutWatch(t *testing.T) {
	// A runtime that cannot watch its sandboxes: the agent connection
	// ending has the watch try again, and then find the process gone.
	e := newEnv(t)
	e.rt.FailWaits(errors.New("no pidfd today"))
	info := e.createOne(t, CreateOptions{})
	time.Sleep(50 * time.Millisecond) // the first Wait fails
	e.rt.FailWaits(nil)
	e.rt.Kill(info.ID, runtime.Exit{})
	e.waitStatus(t, info.ID, StatusDead, apitype.DeadExited)
}

func TestDeadInPool(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 1024 })
	e.build(t, BuildOptions{Tag: "base", PoolSize: 1})
	waitFor(t, "the pool to fill", func() bool { s, _ := e.svc.Snapshot(context.Background(), "base"); return s.PoolReady == 1 })
	pooled := e.rt.IDs()[0]
	e.rt.Kill(pooled, runtime.Exit{})
	// It leaves its pool and the runtime, and is never handed out.
	waitFor(t, "the pool to refill", func() bool {
		ids := e.rt.IDs()
		return len(ids) == 1 && ids[0] != pooled
	})
	kid := e.createOne(t, CreateOptions{SnapshotTag: "base"})
	if kid.ID == pooled || kid.Status != StatusRunning {
		t.Errorf("spawned %+v from a pool whose sandbox %s died", kid, pooled)
	}
	if _, err := e.svc.Get(context.Background(), pooled); !errors.Is(err, ErrNotFound) {
		t.Errorf("a pooled sandbox that died is listed: %v", err)
	}
}

func TestCloseKeepsWatchedSandboxes(t *testing.T) {
	// Closing the service ends the watches, and with them nothing else:
	// no sandbox is found dead or destroyed by it.
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{})
	e.svc.Close()
	if !slices.Contains(e.rt.IDs(), info.ID) {
		t.Fatal("Close destroyed a running sandbox")
	}
	if r := e.row(t, info.ID); r.Status != StatusRunning {
		t.Errorf("after Close the record says %q", r.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.rt.Wait(ctx, info.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the sandbox's process ended at Close: %v", err)
	}
}
