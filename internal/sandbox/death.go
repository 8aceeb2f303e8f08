package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// A sandbox whose runtime process ends while it runs (its init exited, the
// host's OOM killer struck, someone killed it) is dead: it leaves the live
// sandboxes (and its slot) at once, answers calls with ErrDead, gives back
// everything the runtime held, and stays listed for DeadKeep.

// watchRetry bounds how long a watch that could not follow its sandbox's
// runtime process waits before it tries again; the agent connection
// ending makes it try at once.
const watchRetry = 30 * time.Second

// deathGrace is how long a call whose agent connection broke waits to
// learn whether the sandbox died, so that it can say so rather than that
// the agent is unreachable. The watch usually knows within milliseconds.
const deathGrace = 2 * time.Second

// watch follows the runtime process of b, which runs or is pooled, until
// b leaves: when the process ends first, the sandbox is dead.
func (s *Service) watch(b *box) {
	done := make(chan struct{})
	b.mu.Lock()
	b.watchDone = done
	b.mu.Unlock()
	s.watchers.Go(func() {
		defer close(done)
		s.follow(b)
	})
}

func (s *Service) follow(b *box) {
	id := b.rec.ID
	for delay := time.Second; ; delay = min(2*delay, watchRetry) {
		ex, err := s.cfg.Runtime.Wait(b.life, id)
		switch {
		case b.life.Err() != nil:
			return // destroyed, dead, or the service closed
		case errors.Is(err, runtime.ErrNotFound):
			s.died(b, runtime.Exit{Detail: "the runtime holds nothing for it"})
			return
		case err == nil:
			s.died(b, ex)
			return
		}
		s.log.Warn("cannot watch sandbox; trying again", "id", id, "err", err, "in", delay)
		select {
		case <-b.life.Done():
			return
		case <-b.kick:
		case <-time.After(delay):
		}
	}
}

// attach makes c the sandbox's agent connection. The caller holds b.mu,
// or b is not yet visible. When c ends, a watch that could not follow the
// runtime process tries again at once: Wait answers at once for a process
// that is gone.
func (b *box) attach(c *agentproto.Client) {
	b.agent = c
	go func() {
		select {
		case <-c.Closed():
			select {
			case b.kick <- struct{}{}:
			default:
			}
		case <-b.life.Done():
		}
	}()
}

// died handles the end of b's runtime process, which its watch saw.
func (s *Service) died(b *box, ex runtime.Exit) {
	b.mu.Lock()
	b.exit = &ex
	status := b.rec.Status
	b.mu.Unlock()
	switch status {
	case StatusRunning:
		s.markDead(b, ex)
	case StatusPooled:
		// One taken from its pool meanwhile is marked dead by its call's commit.
		if s.unpool(b) {
			s.log.Warn("pooled sandbox died", "id", b.rec.ID, "oom_killed", ex.OOMKilled, "detail", ex.Detail)
			s.destroy(context.WithoutCancel(s.bg), b)
			s.kickPool()
		}
	}
	// Any other status is a sandbox being made (its call's commit marks it
	// dead) or destroyed.
}

// deathOf is the death that exit ex means.
func deathOf(ex runtime.Exit) store.Death {
	d := store.Death{Reason: apitype.DeadExited, Detail: ex.Detail, At: time.Now()}
	if ex.OOMKilled {
		d.Reason = apitype.DeadOOMKilled
	}
	return d
}

// markDead moves a live sandbox to the dead ones, for the reason ex
// gives, and releases everything the runtime held for it.
func (s *Service) markDead(b *box, ex runtime.Exit) {
	s.markDeadWith(b, deathOf(ex))
}

// markDeadWith is markDead for death d. A sandbox no longer live, or a
// service closing, is left as it is.
func (s *Service) markDeadWith(b *box, d store.Death) {
	id := b.rec.ID
	s.mu.Lock()
	b.mu.Lock()
	if s.boxes[id] != b || b.rec.Status != StatusRunning || s.bg.Err() != nil {
		b.mu.Unlock()
		s.mu.Unlock()
		return
	}
	b.rec.Status = StatusDead
	b.death = d
	b.checking = false
	if b.agent != nil {
		b.agent.Close()
		b.agent = nil
	}
	delete(s.boxes, id)
	s.dead[id] = b
	b.mu.Unlock()
	s.mu.Unlock()
	b.end()
	s.stats.Died.Add(1)
	s.log.Warn("sandbox died", "id", id, "reason", d.Reason, "detail", d.Detail)

	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.bg), time.Minute)
	defer cancel()
	// The record first: a daemon killed while the runtime lets go finds a
	// dead sandbox, not one to re-attach to.
	if err := s.cfg.Store.SetDead(ctx, id, StatusDead, d); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("record dead sandbox", "id", id, "err", err)
	}
	s.releaseDead(ctx, b)
}

// releaseDead lets go of what the runtime holds for a dead sandbox; what
// it cannot is retried when the sandbox is forgotten.
func (s *Service) releaseDead(ctx context.Context, b *box) {
	if err := s.teardown(ctx, b); err != nil {
		s.log.Warn("release dead sandbox; retried when it is reaped", "id", b.rec.ID, "err", err)
	}
}

// unpool takes b out of its snapshot's warm pool and reports whether it
// was there.
func (s *Service) unpool(b *box) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.snapshots[b.rec.SnapshotTag]
	if sn == nil {
		return false
	}
	for i, p := range sn.pool {
		if p == b {
			sn.pool = append(sn.pool[:i], sn.pool[i+1:]...)
			return true
		}
	}
	return false
}

// usable returns nil if calls may go to the sandbox now, else why not.
func (b *box) usable() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.usableLocked()
}

func (b *box) usableLocked() error {
	switch {
	case b.rec.Status == StatusDead:
		return b.deadErrLocked()
	case b.rec.Status == StatusPaused:
		return fmt.Errorf("%w: sandbox %s is paused: resume it", ErrPaused, b.rec.ID)
	case b.rec.Status == StatusPausing || b.rec.Status == StatusResuming:
		return fmt.Errorf("%w: sandbox %s is %s", ErrRetry, b.rec.ID, b.rec.Status)
	case b.rec.Status != StatusRunning:
		return fmt.Errorf("sandbox %s is %s: %w", b.rec.ID, b.rec.Status, ErrNotFound)
	case b.checking:
		return fmt.Errorf("%w: the daemon restarted and is still checking sandbox %s", ErrRetry, b.rec.ID)
	}
	return nil
}

// deadErr returns ErrDead, saying why, for a dead sandbox, else nil.
func (b *box) deadErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.Status != StatusDead {
		return nil
	}
	return b.deadErrLocked()
}

func (b *box) deadErrLocked() error {
	d := b.death
	var why string
	switch d.Reason {
	case apitype.DeadOOMKilled:
		why = fmt.Sprintf("the host's OOM killer ended it at its memory limit (%d MiB)", b.rec.MemoryMiB)
	case apitype.DeadUnreachable:
		why = "its agent did not answer after the daemon restarted"
	default:
		why = "its runtime process exited (the sandbox's init ended, or the process was killed)"
	}
	if d.Detail != "" {
		why += ": " + d.Detail
	}
	return fmt.Errorf("sandbox %s is %w (%s, %s ago): %s; what ran in it and its files are gone",
		b.rec.ID, ErrDead, d.Reason, time.Since(d.At).Round(time.Second), why)
}

// fail maps the error of a call to the sandbox's agent. A broken agent
// connection may be the sandbox dying, which its watch learns within
// moments: the call then says that it died.
func (sb *Sandbox) fail(err error) error {
	err = mapErr(err)
	if !errors.Is(err, ErrUnavailable) {
		return err
	}
	b := sb.b
	select {
	case <-b.life.Done():
	case <-time.After(deathGrace):
	}
	if derr := b.deadErr(); derr != nil {
		return derr
	}
	return err
}
