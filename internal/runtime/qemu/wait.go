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
	h, err := r.openQEMU(d, id)
	if errors.Is(err, os.ErrProcessDone) {
		return r.exitOf(d, id), nil
	}
	if err != nil {
		return runtime.Exit{}, err
	}
	defer h.Close()
	if err := h.Wait(ctx); err != nil {
		return runtime.Exit{}, err
	}
	return r.exitOf(d, id), nil
}

// openQEMU opens the VM's QEMU, or returns os.ErrProcessDone if it has
// exited.
func (r *Runtime) openQEMU(d vmDir, id string) (*proc.Handle, error) {
	st, err := d.readState()
	if errors.Is(err, runtime.ErrNotFound) {
		if _, serr := os.Stat(d.path); serr == nil {
			return nil, os.ErrProcessDone // its QEMU never started
		}
		return nil, fmt.Errorf("qemu: sandbox %s: %w", id, err)
	}
	if err != nil {
		return nil, err
	}
	h, err := proc.Open(st.Pid)
	if err != nil {
		return nil, err
	}
	// vm.json may be older than the process now holding its pid: the
	// VM's QEMU names files in the VM's directory.
	if args, err := proc.Cmdline(st.Pid); err != nil || !d.owns(args) {
		h.Close()
		return nil, os.ErrProcessDone
	}
	return h, nil
}

// exitOf says how VM id ended: from its cgroups' count of OOM kills, and
// the guest kernel's panic if its console shows one.
func (r *Runtime) exitOf(d vmDir, id string) runtime.Exit {
	return runtime.Exit{OOMKilled: cgroup.OOMKills(cgroup.Dirs(id)...) > 0, Detail: panicLine(d.consoleLog())}
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
