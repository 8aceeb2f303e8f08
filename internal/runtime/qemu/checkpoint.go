package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Checkpoint implements runtime.Runtime.
//
// Without leaveRunning (a golden snapshot) the VM is stopped, its device
// state migrated into image/state.bin and it quits; its RAM file (when it
// owns one) and its qcow2 chain are hard-linked into image. With
// leaveRunning, RAM is pre-copied into state.bin while the VM runs; at the
// switch-over the VM's active overlay is frozen and a new one stacked on
// it, so the source and the snapshot's children diverge; then it resumes.
func (r *Runtime) Checkpoint(ctx context.Context, id, image string, leaveRunning bool) (time.Duration, error) {
	if !runtime.ValidID(id) {
		return 0, runtime.ErrNotFound
	}
	defer r.beginCheckpoint(id)()
	d, snap := r.vmDir(id), snapDir(image)
	st, err := d.readState()
	if err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	if err := os.MkdirAll(image, 0o755); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	q, err := dialQMP(ctx, d.qmpSock())
	if err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	defer q.Close()
	mctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := r.settleLayers(mctx, q, &st); err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	// The migration thread's work is the runtime's, not the guest's: at
	// the sandbox's own quota its cgroup was throttled 2–3 times a branch,
	// ~90–200 ms in all, which slowed the running source and, when it fell
	// in the switch-over, stopped it ~45 ms longer. One CPU more meanwhile.
	if restore, err := cgroup.RaiseCPUQuota(cgroup.Dirs(id)...); err == nil {
		defer restore()
	}
	out, err := os.OpenFile(snap.stateBin(), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	defer out.Close()
	if err := q.Execute(mctx, "migrate-set-parameters", map[string]any{
		"max-bandwidth": int64(64) << 30, "downtime-limit": 5,
	}, nil); err != nil {
		return 0, fmt.Errorf("qemu: checkpoint: %w", err)
	}
	// A branch's RAM goes in the stream; a golden VM's too, unless it is
	// in the VM's own file, which the snapshot takes whole.
	ss := snapState{MemoryMiB: st.MemoryMiB, CPUs: st.CPUs, DiskSize: st.DiskSize, Live: leaveRunning,
		MemInStream: leaveRunning || !st.MemShared}
	var pause time.Duration
	if leaveRunning {
		pause, err = r.liveCheckpoint(mctx, q, &st, out)
	} else {
		pause, err = r.goldenCheckpoint(mctx, q, st, out, !ss.MemInStream)
	}
	if err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w: %s", id, err, d.tail())
	}
	if err := out.Sync(); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	if err := r.keepFiles(ctx, d, snap, st, ss, !leaveRunning); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	if leaveRunning {
		if err := r.flatten(ctx, q, &st); err != nil {
			r.log.Warn("layers not flattened", "id", id, "err", err)
		}
	}
	return pause, nil
}

// keepFiles puts into snap what its clones need beside the migration
// stream, and then its description: links of the VM's frozen layers (with
// the active one when the VM stopped for good), of its RAM file when the
// stream lacks its RAM, and the overlay template.
func (r *Runtime) keepFiles(ctx context.Context, d vmDir, snap snapDir, st vmState, ss snapState, stopped bool) error {
	frozen := st.Layers[:len(st.Layers)-1]
	if stopped {
		frozen = st.Layers
	}
	for _, l := range frozen {
		if err := fsutil.LinkOrCopy(ctx, d.layer(l), snap.layer(l)); err != nil {
			return err
		}
		// The VM's disk skips flushes (diskOpts): what a snapshot keeps
		// is made durable here, with the source running again.
		if err := fsutil.Sync(snap.layer(l)); err != nil {
			return err
		}
		// Frozen, the layer is every child's backing file (hard links,
		// the same inode) and, after a branch, its source's: read-only
		// for all of them from now on. Each has reopened it read-only.
		if err := r.protectShared(snap.layer(l)); err != nil {
			return err
		}
	}
	ss.Layers = append([]string(nil), frozen...)
	if !ss.MemInStream {
		if err := fsutil.LinkOrCopy(ctx, st.MemPath, snap.mem()); err != nil {
			return err
		}
		// Clones open it read-only (readonly=on,rom=off) and write their
		// RAM privately: it is root's, so none can change it for others.
		if err := r.protectRAM(snap.mem()); err != nil {
			return err
		}
	}
	// Every child's new top layer is the same empty overlay of the
	// snapshot's top (named by its bare file name): made once here, copied
	// at each restore rather than running qemu-img (~10 ms) every time.
	if len(ss.Layers) > 0 {
		if err := r.qemuImgCreate(ctx, snap.overlay(), ss.Layers[len(ss.Layers)-1], "qcow2", ss.DiskSize); err != nil {
			r.log.Warn("no overlay template: children run qemu-img", "err", err)
		}
	}
	return snap.write(ss)
}

// goldenCheckpoint stops the VM, migrates its state into out and has it
// quit. With ignoreShared, its RAM file stays out of the stream.
func (r *Runtime) goldenCheckpoint(ctx context.Context, q *qmp, st vmState, out *os.File, ignoreShared bool) (time.Duration, error) {
	t0 := time.Now()
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return 0, err
	}
	if err := startMigration(ctx, q, out, map[string]bool{"x-ignore-shared": ignoreShared, "pause-before-switchover": false}); err != nil {
		return 0, err
	}
	if _, err := q.waitMigration(ctx, 20*time.Millisecond, "completed"); err != nil {
		return 0, err
	}
	// The VM is done: quit, so nothing writes its RAM file or disk again.
	q.Execute(ctx, "quit", nil, nil)
	if !proc.WaitExit(st.Pid, 10*time.Second) {
		unix.Kill(st.Pid, unix.SIGKILL)
		proc.WaitExit(st.Pid, 5*time.Second)
	}
	return time.Since(t0), nil
}

// liveCheckpoint migrates the running VM into out: its RAM pre-copied
// while it runs (where liveBranch allows), then, stopped for the
// switch-over, its active layer frozen and a new one stacked on it. The VM
// runs on, on the new layer, which st records.
func (r *Runtime) liveCheckpoint(ctx context.Context, q *qmp, st *vmState, out *os.File) (_ time.Duration, err error) {
	next, node, err := r.openNextLayer(ctx, q, st)
	if err != nil {
		return 0, err
	}
	stacked := false
	defer func() {
		if !stacked {
			q.Execute(context.WithoutCancel(ctx), "blockdev-del", map[string]any{"node-name": node}, nil)
		}
	}()
	// Where the copy cannot run live, the source stops for all of it:
	// correct, at the cost of a pause that grows with its RAM.
	var stopped time.Time
	if !r.liveBranch() {
		stopped = time.Now()
		if err := q.Execute(ctx, "stop", nil, nil); err != nil {
			return 0, err
		}
	}
	resume := func() { q.Execute(context.WithoutCancel(ctx), "cont", nil, nil) }
	if err := startMigration(ctx, q, out, map[string]bool{"x-ignore-shared": false, "pause-before-switchover": true, "events": true}); err != nil {
		resume()
		return 0, err
	}
	if err := awaitSwitchover(ctx, q); err != nil {
		resume()
		return 0, err
	}
	if stopped.IsZero() {
		stopped = time.Now()
	}
	// The VM is stopped and its disk still active: freeze the current
	// overlay and stack the new one on it.
	if err := q.Execute(ctx, "blockdev-snapshot", map[string]any{"node": activeNode(st), "overlay": node}, nil); err != nil {
		q.Execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
		resume()
		return 0, err
	}
	stacked = true
	st.Layers = append(st.Layers, next)
	// Recorded once the source runs again (or failed to), whatever happens
	// from here: the new layer is what it writes to now.
	defer func() {
		if werr := r.vmDir(st.ID).writeState(*st); err == nil {
			err = werr
		}
	}()
	if err := q.Execute(ctx, "migrate-continue", map[string]any{"state": "pre-switchover"}, nil); err != nil {
		resume()
		return 0, err
	}
	// The source stands still until this completes.
	if err := awaitMigration(ctx, q, "completed"); err != nil {
		resume()
		return 0, err
	}
	if err := contAfterMigration(ctx, q); err != nil {
		return 0, err
	}
	r.logSwitchover(q, st.ID)
	return pausedFor(q, stopped), nil
}

// startMigration sets a migration's capabilities and starts it into out.
func startMigration(ctx context.Context, q *qmp, out *os.File, caps map[string]bool) error {
	if err := q.setCaps(ctx, caps); err != nil {
		return err
	}
	if err := q.passFD(ctx, "state", out); err != nil {
		return err
	}
	return q.Execute(ctx, "migrate", map[string]any{"uri": "fd:state"}, nil)
}

// awaitSwitchover waits while RAM is pre-copied until the VM stops for
// the switch-over, told by QEMU's event rather than polled for: every step
// from there is the pause. A migration ctx ends is cancelled.
func awaitSwitchover(ctx context.Context, q *qmp) error {
	relax := time.Now().Add(5 * time.Second)
	for {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if !relax.IsZero() {
			wctx, cancel = context.WithDeadline(ctx, relax)
		}
		err := awaitMigration(wctx, q, "pre-switchover")
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			q.Execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
			return ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) || relax.IsZero() {
			return err
		}
		// A busy guest dirties RAM faster than it can be copied in the
		// downtime asked for: accept a longer pause rather than none.
		q.Execute(ctx, "migrate-set-parameters", map[string]any{"downtime-limit": 2000}, nil)
		relax = time.Time{}
	}
}

// awaitMigration waits for QEMU's event of the migration reaching state,
// or ending short of it.
func awaitMigration(ctx context.Context, q *qmp, state string) error {
	ev, err := q.awaitEvent(ctx, "MIGRATION:failed", "MIGRATION:cancelled", "MIGRATION:"+state)
	if err != nil {
		return err
	}
	if ev != "MIGRATION:"+state {
		var ms migrationStatus
		q.Execute(ctx, "query-migrate", nil, &ms)
		return fmt.Errorf("migration %s: %s", strings.TrimPrefix(ev, "MIGRATION:"), ms.ErrorDesc)
	}
	return nil
}

// contAfterMigration resumes a VM whose outgoing migration has completed.
// QEMU reports "completed" a moment before it leaves the finish-migrate
// state, in which it refuses cont: that refusal is retried.
func contAfterMigration(ctx context.Context, q *qmp) error {
	for {
		err := q.Execute(ctx, "cont", nil, nil)
		var qe *qmpError
		if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "not finalized") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// logSwitchover logs, at debug level, when each step of a switch-over
// ended, from QEMU's STOP on, by the timestamps of its events.
func (r *Runtime) logSwitchover(q *qmp, id string) {
	stop, ok := q.lastEvent("STOP")
	if !ok {
		return
	}
	args := []any{"id", id}
	for _, ev := range []string{"MIGRATION:pre-switchover", "MIGRATION:device", "MIGRATION:completed", "RESUME"} {
		if t, ok := q.lastEvent(ev); ok && !t.Before(stop) {
			args = append(args, strings.ToLower(strings.TrimPrefix(ev, "MIGRATION:")), t.Sub(stop))
		}
	}
	r.log.Debug("switch-over", args...)
}

// pausedFor is how long the source's vCPUs stood still: from QEMU's STOP
// event to its RESUME (sent before cont's reply), as QEMU stamped them.
// That covers what the runtime cannot see, such as the stop's drain of the
// disks, and is not blurred by polling. Without both events it is the
// time since the runtime saw the VM stopped.
func pausedFor(q *qmp, stopped time.Time) time.Duration {
	stop, ok1 := q.lastEvent("STOP")
	resume, ok2 := q.lastEvent("RESUME")
	if ok1 && ok2 && resume.After(stop) {
		return resume.Sub(stop)
	}
	return time.Since(stopped)
}
