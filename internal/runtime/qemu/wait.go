package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Wait implements runtime.Runtime. It watches the VM's QEMU by a pidfd.
// QEMU ends when the guest does (a guest whose init exits panics, and
// panic=-1 with -no-reboot ends QEMU), when the host's OOM killer picks
// it, or when it is killed. The guest's own OOM killer, inside, ends a
// guest process and not the VM. The host's is told apart by its count in
// the VM's memory cgroup, which stays until Destroy.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	if !runtime.ValidID(id) {
		return runtime.Exit{}, fmt.Errorf("qemu: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	d := r.vmDir(id)
	st, err := d.readState()
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		if _, serr := os.Stat(d.path); serr != nil {
			return runtime.Exit{}, fmt.Errorf("qemu: sandbox %s: %w", id, err)
		}
		// A VM whose QEMU never started: it has ended.
	case err != nil:
		return runtime.Exit{}, err
	default:
		// vm.json may be older than the process now holding its pid: the
		// VM's QEMU names files in the VM's directory.
		if err := proc.Await(ctx, st.Pid, d.owns); err != nil {
			return runtime.Exit{}, err
		}
	}
	return runtime.Exit{OOMKilled: cgroup.OOMKills(cgroup.Dirs(id)...) > 0, Detail: panicLine(d.consoleLog())}, nil
}

// panicLine returns the last "Kernel panic" line near the end of a
// console log, without its timestamp, or "". The panic's backtrace
// follows it, so more than an error's quote is read.
func panicLine(console string) string {
	tail := fsutil.Tail(console, 16<<10)
	i := strings.LastIndex(tail, "Kernel panic")
	if i < 0 {
		return ""
	}
	line, _, _ := strings.Cut(tail[i:], "\n")
	return strings.TrimSpace(line)
}
