package sandbox

import (
	"fmt"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// noSpace turns err into ErrNoSpace when the disk ran full while what
// (e.g. `snapshot "x"`) was saved to where (the state kept there: snapshots,
// checkpoints, paused sandboxes). The caller has removed what was written.
// The runtime's own words, with host paths, go to the log, not to the
// client. Any other err is returned as it is.
func (s *Service) noSpace(err error, what, where string) error {
	if !runtime.NoSpace(err) {
		return err
	}
	s.log.Warn("disk full: save refused", "what", what, "where", where, "err", err)
	return fmt.Errorf("%w: the disk the daemon keeps %s on is full, so %s was not saved and nothing of it kept: "+
		"free space there (delete snapshots, templates, checkpoints or paused sandboxes no longer needed) and try again",
		ErrNoSpace, where, what)
}
