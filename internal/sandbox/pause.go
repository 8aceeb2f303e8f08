package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Pausing saves a running sandbox whole (memory, processes, files) into
// PausedDir/<id> and lets the runtime go of it: its processes, memory and
// namespaces are freed, and only its record and that directory stay. A
// resume restores it under the same id, token, hostname, policy, labels
// and exposed ports. Its lifetime stands still while it is paused: a resume
// gives it back what was left. A paused sandbox keeps its slot (it may be
// resumed at any time) but not its memory in the budget, and survives a
// daemon restart as it is.

// transitionTimeout bounds a pause, resume or rollback. They run detached
// from their caller's context: one abandoned halfway leaves a sandbox
// neither running nor saved.
const transitionTimeout = 5 * time.Minute

// watchEndTimeout bounds the wait for a stopped sandbox's watch to end
// before it is started again under the same id.
const watchEndTimeout = 10 * time.Second

func validOnExpiry(v string) bool {
	return v == "" || v == apitype.OnExpiryKill || v == apitype.OnExpiryPause
}

// standsStill reports whether a sandbox in status st is out of the
// reaper's reach: paused, or on its way in or out of it.
func standsStill(st string) bool {
	return st == StatusPaused || st == StatusPausing || st == StatusResuming
}

func (s *Service) pausedDir(id string) string { return filepath.Join(s.cfg.PausedDir, id) }

func (s *Service) checkpointRoot(id string) string { return filepath.Join(s.cfg.CheckpointDir, id) }

func (b *box) setLifecycle(l store.Lifecycle) {
	b.mu.Lock()
	b.rec.Lifecycle = l
	b.mu.Unlock()
}

func (b *box) paused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec.Status == StatusPaused
}

// claim moves b from status from to status to, and reports whether it was
// in from (and, if from is running, usable: not being checked).
func (b *box) claim(from, to string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.Status != from || b.checking {
		return false
	}
	b.rec.Status = to
	return true
}

// pausesAtExpiryLocked reports whether b is paused, rather than
// destroyed, when its lifetime ends.
func (b *box) pausesAtExpiryLocked() bool {
	return b.rec.OnExpiry == apitype.OnExpiryPause && b.rec.Status != StatusDead
}

// dueForPause reports whether b's lifetime has ended and its policy says
// pause.
func (b *box) dueForPause(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pausesAtExpiryLocked() && b.rec.Status == StatusRunning && !now.Before(b.rec.ExpiresAt)
}

// pauseInfoLocked adds b's pause state and disk use to info.
func (b *box) pauseInfoLocked(info *Info) {
	l := b.rec.Lifecycle
	info.AutoResume, info.OnExpiry = l.AutoResume, l.OnExpiry
	if info.OnExpiry == "" {
		info.OnExpiry = apitype.OnExpiryKill
	}
	if b.rec.Status == StatusPaused {
		info.PausedAt, info.Remaining, info.PausedBytes = l.PausedAt, l.PausedLeft, l.PausedBytes
		info.ExpiresAt = time.Now().Add(l.PausedLeft)
	}
	for _, c := range b.ckpts {
		info.CheckpointBytes += c.SizeBytes
	}
}

// Pause saves a running sandbox to disk and frees what it held.
func (s *Service) Pause(ctx context.Context, id string) (Info, error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if err := s.checkDiskQuota(ctx, b.owner(), "the paused sandbox"); err != nil {
		return Info{}, err
	}
	b.mu.Lock()
	err = b.usableLocked()
	if err == nil {
		b.rec.Status = StatusPausing
	}
	b.mu.Unlock()
	if err != nil {
		return Info{}, err
	}
	if err := s.pauseClaimed(ctx, b); err != nil {
		return Info{}, err
	}
	return b.info(), nil
}

// pauseAtExpiry pauses a sandbox whose lifetime ended and whose policy
// says pause; if that fails it is killed, as any other would be.
func (s *Service) pauseAtExpiry(ctx context.Context, b *box) {
	s.log.Info("sandbox expired; pausing it", "id", b.rec.ID)
	if err := s.pauseClaimed(ctx, b); err != nil {
		s.log.Error("pause at expiry failed; killing the sandbox", "id", b.rec.ID, "err", err)
		if s.unlist(b) {
			s.stats.Expired.Add(1)
			s.destroy(ctx, b)
		}
	}
}

// unlist removes b from the live sandboxes and reports whether it was there.
func (s *Service) unlist(b *box) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[b.rec.ID] != b {
		return false
	}
	delete(s.boxes, b.rec.ID)
	return true
}

// pauseClaimed pauses b, which the caller moved to StatusPausing.
func (s *Service) pauseClaimed(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transitionTimeout)
	defer cancel()
	b.ckptMu.Lock() // after any branch or checkpoint in flight
	defer b.ckptMu.Unlock()
	id := b.rec.ID
	b.mu.Lock()
	left := time.Until(b.rec.ExpiresAt)
	b.mu.Unlock()
	if left <= 0 { // paused at its expiry: a resume gives it a new lifetime
		left = s.cfg.Limits.DefaultTTL
	}
	t0 := time.Now()
	dir := s.pausedDir(id)
	tmp := dir + ".tmp-" + randhex.New(4)
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(s.cfg.PausedDir, 0o700); err != nil {
		s.backToRunning(b)
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	if _, err := s.cfg.Runtime.Checkpoint(ctx, id, tmp, false); err != nil {
		s.backToRunning(b)
		return s.noSpace(fmt.Errorf("pause sandbox %s: %w", id, err), "sandbox "+id, "paused sandboxes")
	}
	s.stop(ctx, b)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	l := b.rec.Lifecycle
	l.PausedAt, l.PausedLeft, l.PausedBytes = time.Now(), left, diskUsage(dir)
	b.mu.Lock()
	if b.rec.Status != StatusPausing { // deleted meanwhile: its delete removes dir
		b.mu.Unlock()
		return fmt.Errorf("sandbox %q: %w", id, ErrNoSandbox)
	}
	exp := b.rec.ExpiresAt
	b.mu.Unlock()
	if err := s.cfg.Store.SetPaused(ctx, id, StatusPaused, l, exp); err != nil {
		return err
	}
	b.mu.Lock()
	b.rec.Status, b.rec.Lifecycle = StatusPaused, l
	b.mu.Unlock()
	s.kickPool() // its memory is free
	s.log.Info("sandbox paused", "id", id, "bytes", l.PausedBytes, "elapsed", time.Since(t0).Round(time.Millisecond))
	return nil
}

// stop lets the runtime go of a sandbox that is pausing or being rolled
// back: its agent connection, network listeners, processes and namespaces.
// Its watch sees a status that is not running and ends without a verdict,
// which stop waits for, so that it never judges the sandbox's next life.
func (s *Service) stop(ctx context.Context, b *box) {
	s.cfg.Meter.Stopped(ctx, b.rec.ID)
	b.mu.Lock()
	if b.agent != nil {
		b.agent.Close()
		b.agent = nil
	}
	done := b.watchDone
	b.mu.Unlock()
	b.netMu.Lock()
	s.detachNetwork(b)
	b.netMu.Unlock()
	if err := s.cfg.Runtime.Destroy(ctx, b.rec.ID); err != nil {
		s.log.Warn("release a stopped sandbox; retried when it is deleted", "id", b.rec.ID, "err", err)
	}
	if done != nil {
		select {
		case <-done:
		case <-time.After(watchEndTimeout):
			s.log.Warn("the watch of a stopped sandbox did not end", "id", b.rec.ID)
		}
	}
}

// backToRunning undoes a claim whose pause failed before the sandbox
// stopped; one whose process ended meanwhile is dead.
func (s *Service) backToRunning(b *box) {
	b.mu.Lock()
	reverted := b.rec.Status == StatusPausing // else it is being deleted
	if reverted {
		b.rec.Status = StatusRunning
	}
	ex := b.exit
	b.mu.Unlock()
	if reverted && ex != nil {
		s.markDead(b, *ex)
	}
}

// Resume restores a paused sandbox. ttl, if positive, is its lifetime from
// now; else what was left of it at the pause, or for one paused at its
// expiry the default lifetime.
func (s *Service) Resume(ctx context.Context, id string, ttl time.Duration) (Info, error) {
	if max := s.cfg.Limits.MaxTTL; ttl < 0 || ttl > max {
		return Info{}, invalidf("ttl_secs must be between 0 and %d", inSecs(max))
	}
	if err := checkTTLQuota(ctx, ttl); err != nil {
		return Info{}, err
	}
	b, err := s.lookup(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if err := b.deadErr(); err != nil {
		return Info{}, err
	}
	if err := s.resume(ctx, b, ttl); err != nil {
		return Info{}, err
	}
	return b.info(), nil
}

// errNotPaused is ErrConflict for a resume of a sandbox that is not paused.
var errNotPaused = fmt.Errorf("%w: not paused", ErrConflict)

func (s *Service) resume(ctx context.Context, b *box, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transitionTimeout)
	defer cancel()
	id := b.rec.ID
	if err := s.claimResume(ctx, b); err != nil {
		return err
	}
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	t0 := time.Now()
	if err := s.restoreInPlace(ctx, b, s.pausedDir(id)); err != nil {
		b.mu.Lock()
		if b.rec.Status == StatusResuming {
			b.rec.Status = StatusPaused
		}
		b.mu.Unlock()
		return fmt.Errorf("resume sandbox %s (it stays paused): %w", id, err)
	}
	b.mu.Lock()
	l := b.rec.Lifecycle
	if ttl <= 0 {
		ttl = l.PausedLeft
	}
	if ttl <= 0 {
		ttl = s.cfg.Limits.DefaultTTL
	}
	l.PausedAt, l.PausedLeft, l.PausedBytes = time.Time{}, 0, 0
	exp := time.Now().Add(ttl)
	b.mu.Unlock()
	// The record says running before the saved state goes: a daemon
	// killed in between finds a running sandbox and no state to resume.
	if err := s.cfg.Store.SetPaused(ctx, id, StatusRunning, l, exp); err != nil {
		s.stop(ctx, b)
		s.backTo(b, StatusPaused)
		return err
	}
	b.mu.Lock()
	running := b.rec.Status == StatusResuming
	if running {
		b.rec.Status, b.rec.Lifecycle, b.rec.ExpiresAt = StatusRunning, l, exp
	}
	b.mu.Unlock()
	if !running { // deleted meanwhile, maybe before this restore: let it go again
		s.stop(ctx, b)
		return fmt.Errorf("sandbox %q: %w", id, ErrNoSandbox)
	}
	s.watch(b)
	s.cfg.Meter.Started(ctx, meterRun(b, b.owner()))
	if err := os.RemoveAll(s.pausedDir(id)); err != nil {
		s.log.Warn("remove a resumed sandbox's saved state", "id", id, "err", err)
	}
	s.log.Info("sandbox resumed", "id", id, "elapsed", time.Since(t0).Round(time.Millisecond))
	return nil
}

// claimResume moves a paused sandbox to resuming, once its memory fits the
// budget and its tenant's quotas (ctx's caller's) let it run again: under
// s.mu, as a create's reservation.
func (s *Service) claimResume(ctx context.Context, b *box) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.mu.Lock()
	st, checking := b.rec.Status, b.checking
	b.mu.Unlock()
	if checking {
		return fmt.Errorf("%w: the daemon restarted and is still cleaning up after sandbox %s", ErrRetry, b.rec.ID)
	}
	switch st {
	case StatusPaused:
	case StatusRunning:
		return fmt.Errorf("sandbox %s is running: %w", b.rec.ID, errNotPaused)
	case StatusPausing, StatusResuming:
		return fmt.Errorf("%w: sandbox %s is %s", ErrRetry, b.rec.ID, st)
	default:
		return fmt.Errorf("sandbox %s is %s: %w", b.rec.ID, st, errNotPaused)
	}
	if err := s.checkQuotaLocked(ask{tenant: b.owner(), limits: tenant.LimitsOf(ctx), n: 1, cpus: b.rec.CPUs, memoryMiB: int64(b.rec.MemoryMiB)}); err != nil {
		return err
	}
	if budget, used := s.cfg.Limits.MemoryBudgetMiB, s.memoryInUseLocked(); budget > 0 && used+b.rec.MemoryMiB > budget {
		return fmt.Errorf("%w: the memory budget of %d MiB would be exceeded: %d MiB are in use and the sandbox needs %d; kill or pause others first",
			ErrUnavailable, budget, used, b.rec.MemoryMiB)
	}
	if err := s.hostFitsLocked(1); err != nil {
		return err
	}
	b.mu.Lock()
	b.rec.Status = StatusResuming
	b.mu.Unlock()
	return nil
}

func (s *Service) backTo(b *box, status string) {
	b.mu.Lock()
	if b.rec.Status == StatusResuming {
		b.rec.Status = status
	}
	b.mu.Unlock()
}

// restoreInPlace starts b again, under its own id, from the checkpoint in
// dir, with its network and a first call that sets its clock. On error
// the runtime holds nothing for it.
func (s *Service) restoreInPlace(ctx context.Context, b *box, dir string) error {
	_, files, err := s.imageOf(b)
	if err != nil {
		return err
	}
	r := b.rec
	spec := runtime.Spec{ID: r.ID, ImageFiles: files, CPUs: r.CPUs, MemoryMiB: r.MemoryMiB, Hostname: r.ID,
		DiskMiB: r.DiskMiB, Pids: r.Pids, OpenFiles: r.OpenFiles}
	b.mu.Lock()
	b.exit = nil
	b.mu.Unlock()
	t0 := time.Now()
	err = s.cfg.Runtime.Restore(ctx, spec, dir)
	t1 := time.Now()
	if err == nil {
		err = s.attachNetwork(ctx, b)
	}
	t2 := time.Now()
	if err == nil {
		err = s.awaitAgent(ctx, b, restoredCall(r.ID))
	}
	if err != nil {
		s.stop(ctx, b)
		return err
	}
	s.log.Debug("restored in place", "id", r.ID, "restore", t1.Sub(t0), "network", t2.Sub(t1), "agent", time.Since(t2))
	return nil
}

// restoredCall is the first call to a sandbox restored in place: the same
// identity, fresh entropy, and the clock, which stood still meanwhile.
func restoredCall(id string) func(context.Context, *agentproto.Client) error {
	seed := make([]byte, 64)
	rand.Read(seed)
	return func(ctx context.Context, c *agentproto.Client) error {
		return c.Restored(ctx, agentproto.RestoredRequest{SandboxID: id, Hostname: id, Seed: seed, TimeUnixNano: time.Now().UnixNano()})
	}
}

// OpenAuto is Open, but a paused sandbox created with auto_resume is
// resumed first (and one being resumed, waited for).
func (s *Service) OpenAuto(ctx context.Context, id, token string) (*Sandbox, error) {
	sb, err := s.Open(ctx, id, token)
	if err == nil || !(errors.Is(err, ErrPaused) || errors.Is(err, ErrRetry)) {
		return sb, err
	}
	b, lerr := s.lookup(ctx, id)
	if lerr != nil {
		return nil, err
	}
	b.mu.Lock()
	auto, st := b.rec.AutoResume, b.rec.Status
	b.mu.Unlock()
	if !auto || (st != StatusPaused && st != StatusResuming) {
		return nil, err
	}
	if st == StatusResuming {
		// Another call is resuming it: its lock is held until it is done.
		b.ckptMu.Lock()
		b.ckptMu.Unlock()
	} else if rerr := s.resume(ctx, b, 0); rerr != nil && !errors.Is(rerr, errNotPaused) {
		return nil, rerr
	}
	return s.Open(ctx, id, token)
}

// settlePaused has the runtime let go of whatever it holds for a paused
// sandbox after a restart (a resume the earlier daemon did not finish),
// then lets it be resumed.
func (s *Service) settlePaused(ctx context.Context, b *box) {
	if err := s.cfg.Runtime.Destroy(ctx, b.rec.ID); err != nil {
		s.log.Warn("release what a paused sandbox's unfinished resume left", "id", b.rec.ID, "err", err)
	}
	b.mu.Lock()
	b.checking = false
	b.mu.Unlock()
}

// resumeForPort resumes a paused sandbox created with auto_resume before
// a connection to one of its exposed ports, which the caller was entitled
// to (its port token, or a public port).
func (s *Service) resumeForPort(ctx context.Context, id string) (resumed bool, err error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	auto, st := b.rec.AutoResume, b.rec.Status
	b.mu.Unlock()
	switch {
	case !auto || (st != StatusPaused && st != StatusResuming):
		return false, nil
	case st == StatusResuming:
		b.ckptMu.Lock() // held by the resume in flight until it is done
		b.ckptMu.Unlock()
		return true, nil
	}
	if err := s.resume(ctx, b, 0); err != nil && !errors.Is(err, errNotPaused) {
		return false, err
	}
	return true, nil
}

// removeSaved deletes a destroyed sandbox's saved state and checkpoints,
// after any pause or checkpoint in flight.
func (s *Service) removeSaved(b *box) error {
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	id := b.rec.ID
	if err := os.RemoveAll(s.pausedDir(id)); err != nil {
		return err
	}
	return os.RemoveAll(s.checkpointRoot(id))
}

// recoverSaved loads the checkpoints of the sandboxes Recover kept, and
// removes saved state no record names: what a crash left half written
// (.tmp- entries, a checkpoint renamed but not recorded), a resumed
// sandbox's state left behind, or a sandbox whose record went.
func (s *Service) recoverSaved(ctx context.Context) error {
	ckpts, err := s.cfg.Store.Checkpoints(ctx)
	if err != nil {
		return err
	}
	paused := map[string]bool{}           // ids whose saved state is theirs
	names := map[string]map[string]bool{} // checkpoint names kept, by id
	s.mu.Lock()
	for _, m := range []map[string]*box{s.boxes, s.dead} {
		for id, b := range m {
			kept := s.existingCheckpoints(ctx, id, ckpts[id])
			names[id] = map[string]bool{}
			for _, c := range kept {
				names[id][c.Name] = true
			}
			b.mu.Lock()
			b.ckpts = kept
			paused[id] = b.rec.Status == StatusPaused
			b.mu.Unlock()
		}
	}
	s.mu.Unlock()
	if err := s.pruneDir(s.cfg.PausedDir, paused); err != nil {
		return err
	}
	keep := map[string]bool{}
	for id := range names {
		keep[id] = true
	}
	if err := s.pruneDir(s.cfg.CheckpointDir, keep); err != nil {
		return err
	}
	for id, n := range names {
		if err := s.pruneDir(s.checkpointRoot(id), n); err != nil {
			return err
		}
	}
	return nil
}

// existingCheckpoints is cs less those whose directory is gone, whose
// records it drops.
func (s *Service) existingCheckpoints(ctx context.Context, id string, cs []store.Checkpoint) []store.Checkpoint {
	var out []store.Checkpoint
	for _, c := range cs {
		if _, err := os.Stat(filepath.Join(s.checkpointRoot(id), c.Name)); err != nil {
			s.log.Warn("checkpoint lost its directory; dropping it", "id", id, "name", c.Name)
			s.cfg.Store.DeleteCheckpoint(ctx, id, c.Name)
			continue
		}
		out = append(out, c)
	}
	return out
}

// pruneDir removes the entries of dir that keep does not name; a missing
// dir has none.
func (s *Service) pruneDir(dir string, keep map[string]bool) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			s.log.Info("removing saved state no record names", "path", filepath.Join(dir, e.Name()))
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// diskUsage is the disk the files below dir take, each inode once (a
// checkpoint hard-links what it shares with its sandbox's files).
func diskUsage(dir string) int64 {
	var n int64
	seen := map[[2]uint64]bool{}
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			n += fi.Size()
			return nil
		}
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if !seen[key] {
			seen[key] = true
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
