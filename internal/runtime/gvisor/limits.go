package gvisor

import (
	"fmt"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// How a sandbox's bounds are enforced under gVisor.
//
// Disk: the root overlay's upper layer (a file in the sandbox's directory,
// --overlay2=root:dir=…) is a tmpfs of the sandbox's disk size, so a write
// past it fails with ENOSPC inside, df shows the size, and the host file
// grows by at most that much. A checkpoint saves the size with the
// overlay: a restored sandbox keeps its snapshot's.
//
// Processes: gVisor's kernel refuses a new task past RLIMIT_NPROC (per user,
// threads included) with EAGAIN. The agent alone holds CAP_SYS_RESOURCE,
// which exempts it: a fork bomb fills the limit, and the agent (whose Go
// runtime would die if it could not make a thread) still starts the
// command that ends it. Every task costs about two host tasks under
// systrap (the task and its stub); the host cgroup's pids.max is a
// backstop above that, for a sandbox whose tasks ran under many user ids.
// gVisor cannot survive reaching it (it fails to make a stub thread), so
// only that sandbox goes down.
//
// Open files: RLIMIT_NOFILE bounds each process (EMFILE past it), and
// runsc's --fdlimit the host descriptors the sandbox's kernel and gofer
// hold, which every file open from the image's filesystem needs. That too
// is a backstop gVisor does not survive, set well above one process's
// share.

// taskOverhead is the host tasks of a sandbox beyond two per guest task:
// runsc's kernel and gofer threads.
const taskOverhead = 256

// hostPids is the host cgroup's pids.max for a sandbox of pids tasks.
func hostPids(pids int) int64 { return int64(2*pids + taskOverhead) }

// hostFDs is runsc's --fdlimit for a sandbox whose processes may each
// open openFiles files: room for two such processes at once and for the
// dentry cache's descriptors (a thousand by default).
func hostFDs(openFiles int) int { return 2*openFiles + 1024 }

// legacyNoFile is RLIMIT_NOFILE for a sandbox with no bound of its own
// (restored from a snapshot made before bounds existed: a restore needs
// the rlimits it was checkpointed with).
const legacyNoFile = 1048576

// limitFlags are the runsc flags that bound a sandbox's disk and host
// descriptors, given before the subcommand.
func limitFlags(s runtime.Spec, overlay string) []string {
	ov := "--overlay2=root:dir=" + overlay
	if s.DiskMiB > 0 {
		ov += fmt.Sprintf(",size=%dM", s.DiskMiB)
	}
	flags := []string{ov}
	if s.OpenFiles > 0 {
		flags = append(flags, "--fdlimit="+strconv.Itoa(hostFDs(s.OpenFiles)))
	}
	return flags
}

// applyLimits sets the process and file bounds in the OCI spec: rlimits,
// the agent's exemption and the host cgroup's backstop.
func applyLimits(sp *specs.Spec, s runtime.Spec) {
	nofile := uint64(legacyNoFile)
	if s.OpenFiles > 0 {
		nofile = uint64(s.OpenFiles)
	}
	p := sp.Process
	p.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}}
	if s.Pids <= 0 {
		return
	}
	p.Rlimits = append(p.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(s.Pids), Soft: uint64(s.Pids)})
	// Root's exec takes its capabilities from the bounding and the
	// inheritable sets: the agent gains CAP_SYS_RESOURCE from the
	// inheritable one and clears it, so that what it runs cannot.
	p.Capabilities.Inheritable = []string{"CAP_SYS_RESOURCE"}
	limit := hostPids(s.Pids)
	sp.Linux.Resources.Pids = &specs.LinuxPids{Limit: &limit}
}
