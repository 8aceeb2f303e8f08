package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clearInheritable empties the agent's inheritable capabilities. Under
// gVisor the sandbox gives the agent CAP_SYS_RESOURCE through that set
// (and not through its bounding set), which exempts it from the sandbox's
// process limit; cleared, nothing the agent runs gains it at exec.
// Capabilities are a thread's: every thread of the agent's is cleared,
// whichever later starts a command.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}

// vmLimits are the bounds a VM's runtime passes on the kernel command
// line. A VM's kernel is the guest's own, so the agent applies them as it
// starts; under gVisor the sandbox's kernel enforces them from the OCI
// spec. Zero is none.
type vmLimits struct {
	pids   int // processes and threads of the commands the agent runs
	nofile int // open files per process
}

// parseCmdline reads cove.pids= and cove.nofile= from a kernel command line.
func parseCmdline(cmdline string) vmLimits {
	var l vmLimits
	for _, arg := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(arg, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			continue
		}
		switch k {
		case "cove.pids":
			l.pids = n
		case "cove.nofile":
			l.nofile = n
		}
	}
	return l
}

// applyVMLimits sets up a VM's bounds: the root filesystem grown to its
// disk, the open-files limit, and the cgroup the agent's commands run in.
// It returns that cgroup's directory, or nil.
func applyVMLimits(log *slog.Logger) *os.File {
	t0 := time.Now()
	if err := growRoot("/"); err != nil {
		log.Warn("grow the root filesystem", "err", err)
	}
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Warn("read the kernel command line", "err", err)
		return nil
	}
	l := parseCmdline(string(b))
	if l.nofile > 0 {
		// syscall's, not unix's: it also stops os/exec restoring the
		// soft limit the agent started with in what it runs.
		lim := syscall.Rlimit{Cur: uint64(l.nofile), Max: uint64(l.nofile)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			log.Warn("open-files limit", "err", err)
		}
	}
	var cg *os.File
	if l.pids > 0 {
		if cg, err = commandCgroup(cgroupRoot, l.pids); err != nil {
			log.Warn("process limit", "err", err)
		}
	}
	log.Debug("vm limits", "pids", l.pids, "nofile", l.nofile, "elapsed", time.Since(t0))
	return cg
}

const cgroupRoot = "/sys/fs/cgroup"

// commandCgroup makes the cgroup the agent's commands run in, with at
// most pids tasks: a fork bomb fills it while the agent, outside it, goes
// on (and kills it at its timeout).
func commandCgroup(root string, pids int) (*os.File, error) {
	err := unix.Mount("cgroup2", root, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	if err != nil && !errors.Is(err, unix.EBUSY) {
		return nil, fmt.Errorf("mount cgroup2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
		return nil, fmt.Errorf("enable the pids controller: %w", err)
	}
	dir := filepath.Join(root, "commands")
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(pids)), 0o644); err != nil {
		return nil, err
	}
	return os.Open(dir)
}

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS: _IOW('f', 16, __u64).
const ext4IocResizeFS = 0x40086610

// growRoot grows the ext4 filesystem mounted at dir to fill its block
// device: a VM's disk is the image plus the sandbox's disk size, and the
// image's filesystem has next to no free space of its own. Growing to the
// size it has already is a no-op (the kernel checks).
func growRoot(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/size", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return err
	}
	sectors, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("device size %q: %w", b, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return err
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	blocks := sectors * 512 / uint64(fs.Bsize)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ext4IocResizeFS, uintptr(unsafe.Pointer(&blocks))); errno != 0 {
		return fmt.Errorf("resize to %d blocks: %w", blocks, errno)
	}
	return nil
}
