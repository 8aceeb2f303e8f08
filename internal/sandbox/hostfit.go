package sandbox

import "fmt"

// hostFitsLocked says, as ErrUnavailable, why n more sandboxes would not
// fit on the host beside those starting now, or returns nil. The memory
// budget counts limits, which idle sandboxes never reach; this counts what
// the host really has left, so that many small sandboxes cannot run it out
// of memory or pids before the budget is spent.
func (s *Service) hostFitsLocked(n int) error {
	if s.cfg.Host == nil || n <= 0 {
		return nil
	}
	r, err := s.cfg.Host()
	if err != nil {
		s.log.Warn("look at the host's memory and tasks", "err", err)
		return nil
	}
	// Sandboxes reserved but still starting have not taken their share yet.
	if err := r.Fit(n+s.reserved, s.cfg.HostCost, s.cfg.Limits.HostMemoryFloorMiB); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}
