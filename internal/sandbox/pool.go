package sandbox

import (
	"context"
	"sort"
	"time"
)

// pooledTTL is the expiry recorded for pooled sandboxes: they live until
// handed out (which sets a real expiry) or until their snapshot goes.
const pooledTTL = 10 * 365 * 24 * time.Hour

// kickPool wakes the pool filler.
func (s *Service) kickPool() {
	select {
	case s.poolKick <- struct{}{}:
	default:
	}
}

// fillPools keeps every snapshot's warm pool at its size, one restore at
// a time so that refilling never starves the sandboxes in use, and never
// past the pool memory budget.
func (s *Service) fillPools(ctx context.Context) {
	retry := time.NewTimer(0)
	<-retry.C
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.poolKick:
		case <-retry.C:
		}
		for ctx.Err() == nil {
			sn := s.nextToFill()
			if sn == nil {
				break
			}
			if !s.fillOne(ctx, sn) {
				// Back off: a restore that failed may fail again.
				retry.Reset(s.cfg.PoolRetry)
				break
			}
		}
	}
}

// nextToFill picks a snapshot whose pool is short, within the pool budget
// and the memory budget, and reserves a slot in it.
func (s *Service) nextToFill() *snap {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := 0
	var short []*snap
	for _, sn := range s.snapshots {
		used += (len(sn.pool) + sn.filling) * sn.rec.MemoryMiB
		if sn.ready && sn.files.Rootfs != "" && !s.stale(sn) && len(sn.pool)+sn.filling < sn.rec.PoolSize {
			short = append(short, sn)
		}
	}
	sort.Slice(short, func(i, j int) bool { return len(short[i].pool) < len(short[j].pool) })
	if len(short) == 0 || s.hostFitsLocked(1) != nil {
		return nil
	}
	budget, inUse := s.cfg.Limits.MemoryBudgetMiB, s.memoryInUseLocked()
	for _, sn := range short {
		if used+sn.rec.MemoryMiB <= s.cfg.PoolMemoryMiB && (budget <= 0 || inUse+sn.rec.MemoryMiB <= budget) {
			sn.filling++
			return sn
		}
	}
	return nil
}

// fillOne restores one sandbox into sn's pool.
func (s *Service) fillOne(ctx context.Context, sn *snap) bool {
	src, err := s.snapshotSource(sn)
	var b *box
	if err == nil {
		b, err = s.launch(ctx, src, StatusPooled, pooledTTL, "")
	}
	s.mu.Lock()
	sn.filling--
	alive := s.snapshots[sn.rec.Tag] == sn
	if err == nil && alive {
		sn.pool = append(sn.pool, b)
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("warm pool refill failed", "snapshot", sn.rec.Tag, "err", err)
		return false
	}
	if !alive {
		s.destroy(ctx, b) // the snapshot was deleted meanwhile
		return true
	}
	s.watch(b)
	return true
}

// drainPools destroys every pooled sandbox.
func (s *Service) drainPools(ctx context.Context) {
	s.mu.Lock()
	var all []*box
	for _, sn := range s.snapshots {
		all = append(all, sn.pool...)
		sn.pool = nil
	}
	s.mu.Unlock()
	for _, b := range all {
		s.destroy(ctx, b)
	}
}
