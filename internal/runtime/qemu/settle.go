package qemu

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// A daemon killed during a live checkpoint leaves QEMU to finish the
// migration on its own: it stops the VM at the switch-over and waits there
// for a migrate-continue, or a cont, that never comes. settle, run before
// the first agent connection of a VM this runtime is not checkpointing,
// ends such a migration and lets the VM run on; a VM it cannot vouch for
// (stopped after its switch-over, or on a layer its state does not name)
// is reported exited.

// beginCheckpoint marks id as being checkpointed by this runtime, so that
// settle leaves its migration alone; the returned func unmarks it.
func (r *Runtime) beginCheckpoint(id string) (end func()) {
	r.mu.Lock()
	r.checkpointing[id]++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.checkpointing[id]--; r.checkpointing[id] <= 0 {
			delete(r.checkpointing, id)
		}
		r.mu.Unlock()
	}
}

func (r *Runtime) isCheckpointing(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkpointing[id] > 0
}

// vmStatus is QEMU's query-status answer.
type vmStatus struct {
	Running bool   `json:"running"`
	Status  string `json:"status"`
}

// settle ends a migration a dead daemon left running in VM id (see
// above). Anything it cannot check is left to the dial that follows.
func (r *Runtime) settle(ctx context.Context, id string) error {
	if r.isCheckpointing(id) {
		return nil
	}
	d := r.vmDir(id)
	st, err := d.readState()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, d.qmpSock())
	if err != nil {
		return nil
	}
	defer q.Close()
	var ms migrationStatus
	var vs vmStatus
	if q.Execute(ctx, "query-migrate", nil, &ms) != nil || q.Execute(ctx, "query-status", nil, &vs) != nil {
		return nil
	}
	if active := migrating(ms.Status); active {
		q.Execute(ctx, "migrate_cancel", nil, nil)
		if err := awaitMigration(ctx, q, "cancelled"); err != nil {
			r.log.Warn("cancel a dead daemon's migration", "id", id, "err", err)
		}
	}
	switch {
	case vs.Running:
		return nil
	case vs.Status != "paused" && vs.Status != "postmigrate" && vs.Status != "finish-migrate":
		return nil // a launch's states: not a checkpoint's
	case ms.Status == "completed":
		return fmt.Errorf("qemu: sandbox %s: %w: a checkpoint its daemon did not finish left it stopped after the switch-over", id, runtime.ErrExited)
	}
	if ok, err := onRecordedLayer(ctx, q, &st); err != nil || !ok {
		return fmt.Errorf("qemu: sandbox %s: %w: a checkpoint its daemon did not finish left it on a layer its state does not name", id, runtime.ErrExited)
	}
	r.log.Warn("resuming a VM a dead daemon's checkpoint left stopped", "id", id, "migration", ms.Status)
	return contAfterMigration(ctx, q)
}

// migrating reports whether a migration in state s is still under way.
func migrating(s string) bool {
	switch s {
	case "", "none", "completed", "failed", "cancelled":
		return false
	}
	return true
}

// onRecordedLayer reports whether the VM's disk writes to the layer st
// records as its top.
func onRecordedLayer(ctx context.Context, q *qmp, st *vmState) (bool, error) {
	var blocks []blockInfo
	if err := q.Execute(ctx, "query-block", nil, &blocks); err != nil {
		return false, err
	}
	for _, b := range blocks {
		if b.Inserted != nil && b.Inserted.NodeName == activeNode(st) {
			return true, nil
		}
	}
	return false, nil
}
