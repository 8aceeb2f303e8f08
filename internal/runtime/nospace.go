package runtime

import (
	"errors"
	"strings"
	"syscall"
)

// NoSpace reports whether err says a file system ran out of space: an
// ENOSPC from a call of the daemon's own, or the text of one in what a
// backend's tool (runsc, QEMU's migration) reported, which carries no errno.
func NoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	return strings.Contains(strings.ToLower(err.Error()), "no space left on device")
}
