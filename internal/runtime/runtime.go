// Package runtime defines what the sandbox service needs from an isolation
// backend. Each backend (gvisor, qemu) lives in its own package.
//
// A Runtime is keyed by sandbox id and keeps everything it needs on disk, so
// that a restarted daemon can reach, or tear down, what an earlier one made.
package runtime

import (
	"context"
	"errors"
	"net"
	"time"
)

var (
	// ErrNotFound is returned for a sandbox the runtime holds nothing for.
	ErrNotFound = errors.New("runtime: sandbox not found")
	// ErrExited is returned by Dial for a sandbox whose guest is gone (its
	// VM exited, say, after a kernel panic): dialing again will not help.
	ErrExited = errors.New("runtime: sandbox exited")
)

// ImageFiles are where an image's files are on the host, resolved by
// whoever builds a Spec: each backend boots from those it needs.
type ImageFiles struct {
	Rootfs string // the root filesystem, shared and never written
	// The VM artifacts, used by VM backends: the guest's kernel, its
	// initramfs and the root filesystem as a raw disk. They need not
	// exist: an image built without them runs only where Rootfs will do.
	Kernel, Initrd, Disk string
}

// Spec says what to start.
type Spec struct {
	ID string // sandbox id; names every resource the runtime makes
	ImageFiles
	CPUs      int      // vCPUs
	MemoryMiB int      // memory limit
	Hostname  string   // the guest's hostname
	Env       []string // extra KEY=VALUE for the agent
	// Bounds inside the sandbox; zero is none. A restore runs with those
	// of its checkpoint, which the spec repeats.
	DiskMiB   int // disk space the sandbox may write
	Pids      int // processes and threads
	OpenFiles int // open files per process
	// Golden marks a sandbox started to be checkpointed whole, without
	// being left running (a snapshot builder): a runtime may keep its
	// memory where such a checkpoint takes it as it is.
	Golden bool
}

// Exit is how a sandbox's runtime process ended.
type Exit struct {
	// OOMKilled says the host's OOM killer struck in the sandbox's cgroup,
	// at its memory limit, while it ran.
	OOMKilled bool
	// Detail is what else the runtime knows, for logs and errors: the
	// guest console's last line, say. It may be empty.
	Detail string
}

// Runtime starts, reaches and destroys sandboxes.
type Runtime interface {
	// Name is the backend's name, e.g. "gvisor".
	Name() string
	// Version describes the backend's own version, for cove info.
	Version(ctx context.Context) string
	// Start boots a sandbox with the agent as its first process. It returns
	// once the sandbox runs; the agent may still be starting. On error
	// nothing is left behind.
	Start(ctx context.Context, spec Spec) error
	// Dial opens a byte stream to the agent of a running sandbox.
	Dial(ctx context.Context, id string) (net.Conn, error)
	// Netns names the network namespace holding the host end of a running
	// sandbox's link: where cove's egress policy applies and its ports are dialled.
	Netns(id string) string
	// Wait blocks until the runtime process of a started sandbox (runsc's
	// sandbox, the VM's QEMU) has exited, and says how it ended; it
	// returns at once for one that is gone already. It returns ctx's error
	// if ctx ends first, and ErrNotFound if the runtime holds nothing for
	// id. Whatever the sandbox held stays until Destroy.
	Wait(ctx context.Context, id string) (Exit, error)
	// Destroy kills the sandbox and everything in it and releases every
	// resource it held. It is idempotent and succeeds for unknown ids.
	Destroy(ctx context.Context, id string) error
	// Checkpoint saves a running sandbox's whole state (memory, processes,
	// filesystem changes) into the directory image. With leaveRunning the
	// sandbox goes on afterwards; otherwise it stops. It returns how long
	// the sandbox was paused.
	Checkpoint(ctx context.Context, id, image string, leaveRunning bool) (time.Duration, error)
	// Restore starts a new sandbox, spec.ID, from a checkpoint. spec's
	// image must be the one the checkpointed sandbox ran on.
	Restore(ctx context.Context, spec Spec, image string) error
	// List returns the ids of every sandbox the runtime holds resources for,
	// including half-made ones, so the daemon can reap what it does not know.
	List(ctx context.Context) ([]string, error)
	// Close releases what the runtime holds beyond its sandboxes, which
	// keep running for the next daemon to re-attach to.
	Close() error
}

// ValidID reports whether id is one the sandbox service makes. Backends name
// directories, namespaces and cgroups after ids, so nothing else may pass.
func ValidID(id string) bool {
	if id == "" || len(id) > 40 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
