package hostres

import "fmt"

// Cost is what one more idle sandbox is expected to take of the host.
type Cost struct {
	MemoryMiB int64
	Tasks     int
}

// TaskHeadroom is the share of TaskMax kept free of sandboxes: the host's
// own processes, and the daemon's, need pids too.
const TaskHeadroom = 0.05

// Fit says why n more sandboxes of cost c do not fit on the host as r
// saw it, keeping floorMiB of memory available, or returns nil. The
// message says what to do about it.
func (r Reading) Fit(n int, c Cost, floorMiB int64) error {
	if need := int64(n) * c.MemoryMiB; r.MemAvailableMiB-need < floorMiB {
		return fmt.Errorf("the host has %d MiB of memory available and %d more sandboxes need about %d MiB, past the floor of %d MiB kept free: kill or pause some first",
			r.MemAvailableMiB, n, need, floorMiB)
	}
	limit := int(float64(r.TaskMax) * (1 - TaskHeadroom))
	if need := n * c.Tasks; r.Tasks+need > limit {
		return fmt.Errorf("the host runs %d tasks of at most %d (kernel.pid_max, kernel.threads-max) and %d more sandboxes need about %d: kill some first, or raise kernel.pid_max (sysctl -w kernel.pid_max=4194304)",
			r.Tasks, r.TaskMax, n, need)
	}
	return nil
}
