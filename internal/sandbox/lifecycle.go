package sandbox

import (
	"context"
	"time"
)

// Recover rebuilds the service's view from the store and the runtime after
// a (possibly unclean) daemon restart. Every recorded sandbox is either
// re-attached, when it runs and its agent answers, or destroyed; whatever
// the runtime holds that no record names is destroyed too. It then starts
// the reaper.
func (s *Service) Recover(ctx context.Context) error {
	s.runtimeVersion = s.cfg.Runtime.Version(ctx)
	if err := s.recoverSnapshots(ctx); err != nil {
		return err
	}
	recs, err := s.cfg.Store.Sandboxes(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	now := time.Now()
	for _, rec := range recs {
		known[rec.ID] = true
		b := &box{rec: rec}
		if rec.Status == StatusRunning && now.Before(rec.ExpiresAt) && rec.Backend == s.cfg.Runtime.Name() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := s.connect(cctx, rec.ID)
			cancel()
			if err == nil {
				b.agent = c
				s.mu.Lock()
				s.boxes[rec.ID] = b
				s.mu.Unlock()
				s.log.Info("sandbox re-attached", "id", rec.ID)
				continue
			}
			s.log.Warn("sandbox lost", "id", rec.ID, "err", err)
		}
		s.log.Info("cleaning up sandbox from an earlier run", "id", rec.ID, "status", rec.Status)
		s.destroy(ctx, b)
	}
	ids, err := s.cfg.Runtime.List(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !known[id] {
			s.log.Info("destroying orphaned sandbox", "id", id)
			if err := s.cfg.Runtime.Destroy(ctx, id); err != nil {
				s.log.Warn("destroy orphan", "id", id, "err", err)
			}
		}
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopReaper = cancel
	s.reaperDone = make(chan struct{})
	s.poolDone = make(chan struct{})
	go s.reap(rctx)
	go func() {
		defer close(s.poolDone)
		s.fillPools(rctx)
	}()
	s.kickPool()
	return nil
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
			for _, b := range s.expiredBoxes(now) {
				s.log.Info("sandbox expired", "id", b.rec.ID)
				s.stats.Expired.Add(1)
				s.destroy(ctx, b)
			}
		}
	}
}

// expiredBoxes removes and returns the sandboxes whose time is up.
func (s *Service) expiredBoxes(now time.Time) []*box {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*box
	for id, b := range s.boxes {
		if b.expired(now) {
			delete(s.boxes, id)
			out = append(out, b)
		}
	}
	return out
}

// Close stops the reaper and the pool filler, destroys pooled sandboxes
// and drops agent connections. Sandboxes in use keep running; the next
// daemon re-attaches to them.
func (s *Service) Close() {
	if s.stopReaper != nil {
		s.stopReaper()
		<-s.reaperDone
		<-s.poolDone
	}
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
	}
}
