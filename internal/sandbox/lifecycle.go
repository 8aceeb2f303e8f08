package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Recover rebuilds the service's view from the store and the runtime after
// a (possibly unclean) daemon restart, and starts the reaper. It returns
// once the records are read, before any sandbox is checked, so the daemon
// can serve at once: the checks run in the background, a bounded number at
// a time (Recovered says when they are done), and a call to a sandbox still
// being checked is refused with ErrRetry. A recorded sandbox that runs and
// whose agent answers is re-attached; one whose runtime process is gone,
// or whose agent does not answer, is dead. Every other record, and
// whatever the runtime holds that no record names, is destroyed. The warm
// pools fill once the checks are done.
func (s *Service) Recover(ctx context.Context) error {
	s.runtimeVersion = s.cfg.Runtime.Version(ctx)
	if err := s.recoverSnapshots(ctx); err != nil {
		return err
	}
	recs, err := s.cfg.Store.Sandboxes(ctx)
	if err != nil {
		return err
	}
	deaths, err := s.cfg.Store.Deaths(ctx)
	if err != nil {
		return err
	}
	ports, err := s.cfg.Store.Ports(ctx)
	if err != nil {
		return err
	}
	// Listed before any create can start a sandbox: whatever is here and
	// has no record is an orphan.
	ids, err := s.cfg.Runtime.List(ctx)
	if err != nil {
		return err
	}
	p := s.plan(recs, deaths, ports, ids)
	if err := s.cfg.Meter.Adopt(ctx, boxIDs(p.check), boxIDs(p.paused, p.release)); err != nil {
		return fmt.Errorf("adopt the usage intervals an earlier daemon left open: %w", err)
	}
	if err := s.recoverSaved(ctx); err != nil {
		return err
	}
	s.recovering.Store(int64(p.len()))

	s.reaperDone = make(chan struct{})
	s.poolDone = make(chan struct{})
	go s.reap(s.bg)
	go func() {
		defer close(s.poolDone)
		s.reconcile(s.bg, p)
		close(s.recovered)
		s.kickPool()
		s.fillPools(s.bg)
	}()
	return nil
}

// boxIDs are the ids of the boxes in lists.
func boxIDs(lists ...[]*box) []string {
	var out []string
	for _, l := range lists {
		for _, b := range l {
			out = append(out, b.rec.ID)
		}
	}
	return out
}

// Recovered is closed once Recover's checks and clean-ups are done.
func (s *Service) Recovered() <-chan struct{} { return s.recovered }

// Recovering returns how many recorded sandboxes Recover has still to
// check or clean up.
func (s *Service) Recovering() int { return int(s.recovering.Load()) }

// recovery is what Recover found to do.
type recovery struct {
	check   []*box   // recorded running: re-attach, or find dead
	destroy []*box   // records of sandboxes not to keep
	release []*box   // dead, still listed: let go of what may be left
	orphans []string // held by the runtime, without a record
	paused  []*box   // recorded paused: let go of a resume left half done
	// recorded mid-rollback: what the runtime holds is a restore the
	// earlier daemon did not finish, whose agent was never fixed up
	halted []*box
}

func (p recovery) len() int {
	return len(p.check) + len(p.destroy) + len(p.release) + len(p.orphans) + len(p.paused) + len(p.halted)
}

// plan sorts the records an earlier daemon left, and the runtime's
// sandboxes, into what to check, keep as dead, and destroy. Those to
// check and the dead are listed from now on; those to check keep their
// exposed ports.
func (s *Service) plan(recs []store.Sandbox, deaths map[string]store.Death, ports map[string][]store.Port, ids []string) recovery {
	var p recovery
	known := map[string]bool{}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range recs {
		known[rec.ID] = true
		b := s.newBox(rec)
		switch {
		case rec.Status == StatusDead:
			b.death = deaths[rec.ID]
			if b.expired(now, s.cfg.DeadKeep) {
				p.destroy = append(p.destroy, b)
				continue
			}
			s.dead[rec.ID] = b
			p.release = append(p.release, b)
		case rec.Status == StatusPaused && rec.Backend == s.cfg.Runtime.Name():
			// Its state is on disk; whatever the runtime holds for it is
			// a resume the earlier daemon did not finish, to be undone.
			b.checking = true
			s.boxes[rec.ID] = b
			p.paused = append(p.paused, b)
		case rec.Status == StatusResuming && rec.Backend == s.cfg.Runtime.Name():
			b.rec.Status = StatusRunning // for markDeadWith
			b.checking = true
			s.boxes[rec.ID] = b
			p.halted = append(p.halted, b)
		case rec.Status == StatusRunning && (now.Before(rec.ExpiresAt) || rec.OnExpiry == apitype.OnExpiryPause) && rec.Backend == s.cfg.Runtime.Name():
			// One whose lifetime ended while no daemon ran, and which is
			// to be paused then, is paused once it is re-attached.
			b.checking = true
			b.setPorts(ports[rec.ID])
			s.boxes[rec.ID] = b
			p.check = append(p.check, b)
		default:
			p.destroy = append(p.destroy, b)
		}
	}
	for _, id := range ids {
		if !known[id] {
			p.orphans = append(p.orphans, id)
		}
	}
	return p
}

// recoverParallelism bounds the checks and clean-ups Recover runs at
// once: each mostly waits, on the runtime or on an agent.
const recoverParallelism = 16

// reattachTimeout bounds how long a recorded sandbox's agent may take to
// answer a restarted daemon.
const reattachTimeout = 5 * time.Second

// reconcile carries out p, checks first, recoverParallelism at a time.
func (s *Service) reconcile(ctx context.Context, p recovery) {
	sem := make(chan struct{}, recoverParallelism)
	var wg sync.WaitGroup
	run := func(f func()) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() {
				s.recovering.Add(-1)
				<-sem
			}()
			f()
		})
	}
	for _, b := range p.check {
		run(func() { s.reattach(b) })
	}
	for _, b := range p.destroy {
		run(func() {
			s.log.Info("cleaning up sandbox from an earlier run", "id", b.rec.ID, "status", b.rec.Status)
			s.destroy(ctx, b)
		})
	}
	for _, b := range p.release {
		run(func() { s.releaseDead(ctx, b) })
	}
	for _, b := range p.paused {
		run(func() { s.settlePaused(ctx, b) })
	}
	for _, b := range p.halted {
		run(func() {
			s.markDeadWith(b, store.Death{Reason: apitype.DeadExited, At: time.Now(),
				Detail: "the daemon stopped during a rollback; create a sandbox and roll back anew"})
		})
	}
	for _, id := range p.orphans {
		run(func() {
			s.log.Info("destroying orphaned sandbox", "id", id)
			if err := s.cfg.Runtime.Destroy(ctx, id); err != nil {
				s.log.Warn("destroy orphan", "id", id, "err", err)
			}
		})
	}
	wg.Wait()
}

// reattach checks a recorded running sandbox: its watch starts at once,
// and finds it dead if its runtime process is gone, while its agent is
// dialled; an agent that answers makes it live again, with its network
// attached anew (the earlier daemon's listeners went with it).
func (s *Service) reattach(b *box) {
	id := b.rec.ID
	s.watch(b)
	ctx, cancel := context.WithTimeout(b.life, reattachTimeout)
	defer cancel()
	c, err := s.connect(ctx, id)
	b.mu.Lock()
	if b.rec.Status != StatusRunning || s.bg.Err() != nil { // dead, deleted or expired, or closing
		b.mu.Unlock()
		if c != nil {
			c.Close()
		}
		return
	}
	if err == nil {
		b.attach(c)
		b.mu.Unlock()
		s.reattachNetwork(b)
		b.mu.Lock()
		b.checking = false
		b.mu.Unlock()
		s.log.Info("sandbox re-attached", "id", id)
		return
	}
	b.mu.Unlock()
	// The watch, if it is about to find the process gone, knows better
	// why: an OOM kill, say.
	select {
	case <-b.life.Done():
		return
	case <-time.After(deathGrace):
	}
	d := store.Death{Reason: apitype.DeadUnreachable, Detail: err.Error(), At: time.Now()}
	if errors.Is(err, runtime.ErrExited) || errors.Is(err, runtime.ErrNotFound) {
		d.Reason = apitype.DeadExited
	}
	s.log.Warn("sandbox lost: its agent does not answer", "id", id, "err", err)
	s.markDeadWith(b, d)
}

// reattachNetwork attaches a re-attached sandbox's network, unless it
// left meanwhile: its teardown, which detaches, waits for netMu. Until
// then its rules send every connection to listeners that are not there,
// so nothing gets out.
func (s *Service) reattachNetwork(b *box) {
	ctx, cancel := context.WithTimeout(b.life, reattachTimeout)
	defer cancel()
	b.netMu.Lock()
	defer b.netMu.Unlock()
	b.mu.Lock()
	running := b.rec.Status == StatusRunning
	b.mu.Unlock()
	if !running {
		return
	}
	if err := s.attachNetwork(ctx, b); err != nil {
		s.log.Warn("sandbox re-attached without its network; setting its policy again attaches it", "id", b.rec.ID, "err", err)
	}
}

// reapInterval is how often expiry is checked; it bounds how long an
// expired sandbox lingers.
const reapInterval = 250 * time.Millisecond

// reap destroys expired sandboxes until ctx is done.
func (s *Service) reap(ctx context.Context) {
	defer close(s.reaperDone)
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			expired, dead, pause := s.expiredBoxes(now)
			for _, b := range pause {
				go s.pauseAtExpiry(ctx, b)
			}
			for _, b := range expired {
				s.log.Info("sandbox expired", "id", b.rec.ID)
				s.stats.Expired.Add(1)
				s.destroy(ctx, b)
			}
			for _, b := range dead {
				s.log.Info("dead sandbox forgotten", "id", b.rec.ID)
				s.destroy(ctx, b)
			}
		}
	}
}

// expiredBoxes removes and returns the live sandboxes whose time is up,
// and the dead ones kept long enough; those to be paused at their expiry
// stay, marked pausing.
func (s *Service) expiredBoxes(now time.Time) (expired, dead, pause []*box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.boxes {
		if b.dueForPause(now) {
			if b.claim(StatusRunning, StatusPausing) {
				pause = append(pause, b)
			}
			continue
		}
		if b.expired(now, s.cfg.DeadKeep) {
			delete(s.boxes, id)
			expired = append(expired, b)
		}
	}
	for id, b := range s.dead {
		if b.expired(now, s.cfg.DeadKeep) {
			delete(s.dead, id)
			dead = append(dead, b)
		}
	}
	return expired, dead, pause
}

// Close stops the reaper and the pool filler, destroys pooled sandboxes
// and drops agent connections. Sandboxes in use keep running; the next
// daemon re-attaches to them.
func (s *Service) Close() {
	s.stopBG()
	if s.reaperDone != nil { // Recover started them
		<-s.reaperDone
		<-s.poolDone
	}
	s.watchers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.drainPools(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.boxes {
		b.mu.Lock()
		if b.agent != nil {
			b.agent.Close()
			b.agent = nil
		}
		b.mu.Unlock()
		// Its rules stay in its namespace, for the next daemon to attach
		// to; the listeners are this daemon's.
		s.detachNetwork(b)
	}
}
