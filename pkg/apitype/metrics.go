package apitype

// SandboxMetrics is GET /v1/sandboxes/{id}/metrics: what the sandbox uses
// now, read from its cgroup on the host (for QEMU, the VM's: the guest's
// RAM as the host backs it, and QEMU's CPU time). Figures the host does
// not keep are 0; a sandbox not running (paused) has only disk_bytes.
type SandboxMetrics struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Backend string `json:"backend"`
	// CPUSeconds is CPU time used since the sandbox started.
	CPUSeconds float64 `json:"cpu_seconds"`
	// MemoryBytes is memory in use now, MemoryPeakBytes the most it has
	// used (0 where the host keeps no peak), MemoryLimitBytes its limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryPeakBytes  int64 `json:"memory_peak_bytes"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// DiskWrittenBytes is what its processes wrote to host block devices
	// (the cgroup's I/O accounting); DiskBytes what its saved state (pause
	// image, checkpoints) takes on the host's disk.
	DiskWrittenBytes int64 `json:"disk_written_bytes"`
	DiskBytes        int64 `json:"disk_bytes"`
	// Pids is the number of host tasks in its cgroup (gVisor: runsc's
	// threads; QEMU: the VM's).
	Pids int64 `json:"pids"`
	// Cgroup is false when no cgroup figures could be read (the sandbox
	// is not running).
	Cgroup bool `json:"cgroup"`
}
