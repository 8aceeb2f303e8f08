package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// A checkpoint is a sandbox's whole state saved while it runs (paused
// only as long as a branch pauses it), into CheckpointDir/<id>/<name>; a
// rollback restores it into the same sandbox: same id, token, policy,
// labels and ports, with memory, processes and files as they were. A
// checkpoint may be rolled back to any number of times; they all go with
// the sandbox, and count in its disk use.

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	Name      string
	SizeBytes int64
	CreatedAt time.Time
	// Pause is how long taking it stood the sandbox still (set by
	// Checkpoint only).
	Pause time.Duration
}

func checkpointInfo(c store.Checkpoint) CheckpointInfo {
	return CheckpointInfo{Name: c.Name, SizeBytes: c.SizeBytes, CreatedAt: c.CreatedAt}
}

func validCheckpointName(name string) error {
	if !tagRE.MatchString(name) {
		return invalidf("checkpoint name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// findCheckpointLocked returns b's checkpoint called name, or false.
func (b *box) findCheckpointLocked(name string) (store.Checkpoint, bool) {
	i := slices.IndexFunc(b.ckpts, func(c store.Checkpoint) bool { return c.Name == name })
	if i < 0 {
		return store.Checkpoint{}, false
	}
	return b.ckpts[i], true
}

// Checkpoint saves the running sandbox as checkpoint name ("": one is
// made up) while it keeps running.
func (sb *Sandbox) Checkpoint(ctx context.Context, name string) (CheckpointInfo, error) {
	s, b := sb.s, sb.b
	if name == "" {
		name = "cp-" + time.Now().UTC().Format("20060102-150405") + "-" + randhex.New(2)
	}
	if err := validCheckpointName(name); err != nil {
		return CheckpointInfo{}, err
	}
	if err := s.checkDiskQuota(ctx, b.owner(), fmt.Sprintf("checkpoint %q", name)); err != nil {
		return CheckpointInfo{}, err
	}
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	id := b.rec.ID
	b.mu.Lock()
	_, dup := b.findCheckpointLocked(name)
	b.mu.Unlock()
	if dup {
		return CheckpointInfo{}, fmt.Errorf("%w: sandbox %s has a checkpoint %q: pick another name", ErrConflict, id, name)
	}
	root := s.checkpointRoot(id)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint sandbox %s: %w", id, err)
	}
	// After the temp dir: a first checkpoint that failed leaves no empty
	// root behind (one that holds checkpoints is not removed).
	defer os.Remove(root)
	tmp := filepath.Join(root, ".tmp-"+name+"-"+randhex.New(4))
	defer os.RemoveAll(tmp)
	pause, err := s.measurePause(ctx, b, func() error {
		_, err := s.cfg.Runtime.Checkpoint(ctx, id, tmp, true)
		return err
	})
	what := fmt.Sprintf("checkpoint %q of sandbox %s", name, id)
	if err != nil {
		return CheckpointInfo{}, s.noSpace(fmt.Errorf("checkpoint sandbox %s: %w", id, err), what, "checkpoints")
	}
	dir := filepath.Join(root, name)
	if err := os.Rename(tmp, dir); err != nil {
		return CheckpointInfo{}, s.noSpace(fmt.Errorf("checkpoint sandbox %s: %w", id, err), what, "checkpoints")
	}
	c := store.Checkpoint{SandboxID: id, Name: name, SizeBytes: diskUsage(dir), CreatedAt: time.Now()}
	if err := s.cfg.Store.PutCheckpoint(ctx, c); err != nil {
		os.RemoveAll(dir)
		if errors.Is(err, store.ErrExists) {
			return CheckpointInfo{}, fmt.Errorf("%w: sandbox %s has a checkpoint %q: pick another name", ErrConflict, id, name)
		}
		return CheckpointInfo{}, err
	}
	b.mu.Lock()
	b.ckpts = append(b.ckpts, c)
	b.mu.Unlock()
	s.log.Info("checkpoint saved", "id", id, "name", name, "bytes", c.SizeBytes, "pause", pause)
	out := checkpointInfo(c)
	out.Pause = pause
	return out, nil
}

// Checkpoints lists the sandbox's checkpoints, oldest first.
func (sb *Sandbox) Checkpoints() []CheckpointInfo {
	b := sb.b
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]CheckpointInfo, len(b.ckpts))
	for i, c := range b.ckpts {
		out[i] = checkpointInfo(c)
	}
	return out
}

// Rollback restores checkpoint name into the sandbox, in place. Should the
// restore fail, the sandbox is dead: its state before the call is gone.
func (sb *Sandbox) Rollback(ctx context.Context, name string) (Info, error) {
	s, b := sb.s, sb.b
	if name == "" {
		return Info{}, invalidf("checkpoint is empty: name the checkpoint to roll back to")
	}
	if err := validCheckpointName(name); err != nil {
		return Info{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transitionTimeout)
	defer cancel()
	id := b.rec.ID
	b.mu.Lock()
	_, ok := b.findCheckpointLocked(name)
	err := b.usableLocked()
	if ok && err == nil {
		b.rec.Status = StatusResuming
	}
	b.mu.Unlock()
	switch {
	case !ok:
		return Info{}, fmt.Errorf("sandbox %s has no checkpoint %q: %w", id, name, ErrNotFound)
	case err != nil:
		return Info{}, err
	}
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	t0 := time.Now()
	// Recorded, so that a daemon killed from here on finds a rollback left
	// half done (Recover), not a sandbox to re-attach to.
	if err := s.cfg.Store.SetStatus(ctx, id, StatusResuming); err != nil {
		s.backTo(b, StatusRunning)
		return Info{}, fmt.Errorf("roll sandbox %s back: %w", id, err)
	}
	s.stop(ctx, b)
	if err := s.restoreInPlace(ctx, b, filepath.Join(s.checkpointRoot(id), name)); err != nil {
		s.backTo(b, StatusRunning)
		s.markDeadWith(b, store.Death{Reason: apitype.DeadExited, Detail: "rollback to " + name + " failed: " + err.Error(), At: time.Now()})
		return Info{}, fmt.Errorf("roll sandbox %s back to %s: %w", id, name, err)
	}
	b.mu.Lock()
	live := b.rec.Status == StatusResuming
	if live {
		b.rec.Status = StatusRunning
	}
	b.mu.Unlock()
	if !live { // deleted meanwhile, maybe before this restore: let it go again
		s.stop(ctx, b)
		return Info{}, fmt.Errorf("sandbox %q: %w", id, ErrNoSandbox)
	}
	if err := s.cfg.Store.SetStatus(ctx, id, StatusRunning); err != nil {
		s.log.Warn("record a rolled-back sandbox running; a restart finds it dead", "id", id, "err", err)
	}
	s.watch(b)
	s.cfg.Meter.Started(ctx, meterRun(b, b.owner()))
	s.log.Info("sandbox rolled back", "id", id, "checkpoint", name, "elapsed", time.Since(t0).Round(time.Millisecond))
	return b.info(), nil
}
