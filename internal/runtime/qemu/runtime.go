// Package qemu runs sandboxes as QEMU microVMs: each with its own guest
// kernel (Debian's cloud kernel), an ext4 root disk behind a per-VM qcow2
// overlay, RAM in a file for a snapshot builder (so a golden snapshot's
// clones map it copy-on-write) and anonymous otherwise, and a per-VM
// network namespace holding one tap device.
//
// The agent answers on a virtio-serial port (see package seriallink): the
// daemon connects to the VM's agent.sock, and a clone restored from a
// snapshot resynchronises with the new connection in-band. The network
// (the same guest addresses in every VM) is the sandbox's own.
package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Config configures the runtime.
type Config struct {
	Qemu  string // qemu-system-x86_64; default from PATH
	Dir   string // one directory per VM; absolute
	Accel string // "tcg" or "kvm"; default "tcg"
	// User, if set, is the unprivileged user QEMU runs as (its VM
	// directory and tap belong to it).
	User string
	// UIDs, if Count > 0, gives every VM a host uid of its own from the
	// range (its gid the same number): its QEMU runs as that uid and its
	// directory, disk and tap are that uid's, so one VM's QEMU cannot open
	// another's files. User is still needed: its group, QEMU's
	// supplementary group, reads the files a snapshot's children share.
	UIDs UIDRange
	// NoSandbox drops QEMU's -sandbox seccomp filter (debugging only).
	NoSandbox bool
	Logger    *slog.Logger
}

// Runtime is the QEMU microVM backend.
type Runtime struct {
	cfg      Config
	qemu     string
	qemuImg  string
	uid, gid int // -1 when QEMU runs as root
	// uids, if not nil, holds each VM's own uid (Config.UIDs); uid and gid
	// are then the shared user's, whose group reads shared files.
	uids   *uidPool
	kvmGid int // supplementary group for /dev/kvm (0: none)
	major  int // QEMU's major version
	// romOff: this QEMU's memory-backend-file has rom=, so a clone can
	// open its snapshot's RAM file read-only and still write its RAM
	// (privately). Older ones map a readonly=on file as the guest's ROM.
	romOff bool
	log    *slog.Logger

	mu sync.Mutex
	// agentConns holds the agent socket connections made while restoring,
	// each for the first Dial of its VM.
	agentConns map[string]net.Conn
	// checkpointing counts the checkpoints under way per VM (settle.go).
	checkpointing map[string]int
}

var _ runtime.Runtime = (*Runtime)(nil)

// callTimeout bounds every qemu-img call and a failed launch's cleanup.
const callTimeout = 30 * time.Second

// New checks that QEMU is usable and prepares the state directory.
func New(cfg Config) (*Runtime, error) {
	if cfg.Qemu == "" {
		cfg.Qemu = "qemu-system-x86_64"
	}
	if cfg.Accel == "" {
		cfg.Accel = "tcg"
	}
	if cfg.Accel != "tcg" && cfg.Accel != "kvm" {
		return nil, fmt.Errorf("qemu: accelerator %q: want tcg or kvm", cfg.Accel)
	}
	q, err := exec.LookPath(cfg.Qemu)
	if err != nil {
		return nil, fmt.Errorf("qemu: %s not found (%w): INSTALL_QEMU=1 scripts/install-deps.sh", cfg.Qemu, err)
	}
	qi, err := exec.LookPath("qemu-img")
	if err != nil {
		return nil, fmt.Errorf("qemu: qemu-img not found (%w)", err)
	}
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("qemu: state dir %q must be absolute", cfg.Dir)
	}
	if err := os.MkdirAll(cfg.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	r := &Runtime{cfg: cfg, qemu: q, qemuImg: qi, uid: -1, gid: -1, log: cfg.Logger, agentConns: map[string]net.Conn{}, checkpointing: map[string]int{}}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.major = majorVersion(r.Version(context.Background()))
	r.romOff = r.hasMemFileProp(context.Background(), "rom")
	if !r.romOff {
		r.log.Warn("qemu: memory-backend-file has no rom=: clones open their snapshot's RAM file read-write (QEMU 8.2 or later opens it read-only)", "qemu", r.Version(context.Background()))
	}
	if cfg.User != "" {
		u, err := user.Lookup(cfg.User)
		if err != nil {
			return nil, fmt.Errorf("qemu: user %q: %w", cfg.User, err)
		}
		r.uid, _ = strconv.Atoi(u.Uid)
		r.gid, _ = strconv.Atoi(u.Gid)
		// QEMU must reach its own directory below this one: every
		// directory above it gets search (not read) permission.
		if err := ensureTraversable(cfg.Dir); err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
		if cfg.Accel == "kvm" {
			if g, err := user.LookupGroup("kvm"); err == nil {
				r.kvmGid, _ = strconv.Atoi(g.Gid)
			}
		}
	}
	if cfg.UIDs.Count > 0 {
		if err := cfg.UIDs.check(); err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
		// Clones of one snapshot, each its own uid, read its RAM file
		// and frozen layers through the shared group: they must be able
		// to open the RAM file read-only.
		if r.uid < 0 || !r.romOff {
			return nil, ErrUIDsUnsupported
		}
		r.uids = newUIDPool(cfg.UIDs)
		if err := r.uids.recover(cfg.Dir); err != nil {
			return nil, fmt.Errorf("qemu: recover VM uids: %w", err)
		}
	}
	return r, nil
}

// ensureTraversable gives dir and every directory above it search
// permission for others, which an unprivileged QEMU needs to reach its
// own directory; nothing gets read permission.
func ensureTraversable(dir string) error {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o111); err != nil {
				return err
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// chown gives path to the user QEMU runs as, if not root: with one uid
// per VM, the uid of the VM whose directory holds path (its VM's own
// files are all there); anything else, the shared user.
func (r *Runtime) chown(path string) error {
	uid, gid := r.uid, r.gid
	if rel, err := filepath.Rel(r.cfg.Dir, path); err == nil && r.uids != nil && !strings.HasPrefix(rel, "..") {
		id, _, _ := strings.Cut(rel, string(filepath.Separator))
		if u, ok := r.uids.lookup(id); ok {
			uid, gid = u, u
		}
	}
	if uid < 0 {
		return nil
	}
	return os.Chown(path, uid, gid)
}

// qemuUser is who VM id's QEMU runs as: its own uid (and a gid of the same
// number) with the shared user's group besides, or the shared user; -1
// for root.
func (r *Runtime) qemuUser(id string) (uid, gid int, groups []int) {
	if r.uids != nil {
		if u, ok := r.uids.lookup(id); ok {
			return u, u, []int{r.gid}
		}
	}
	return r.uid, r.gid, nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "qemu" }

// Accel is the accelerator VMs run under.
func (r *Runtime) Accel() string { return r.cfg.Accel }

// Version implements runtime.Runtime.
func (r *Runtime) Version(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.qemu, "--version").Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line + " (" + r.cfg.Accel + ") " + machineRev
}

// hasMemFileProp reports whether this QEMU's memory-backend-file has the
// property prop (its "-object memory-backend-file,help" lists "prop=").
func (r *Runtime) hasMemFileProp(ctx context.Context, prop string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.qemu, "-object", "memory-backend-file,help").CombinedOutput()
	if err != nil {
		return false
	}
	return memFileHasProp(string(out), prop)
}

// memFileHasProp reads a property's line off QEMU's list of an object's
// options ("  rom=<OnOffAuto>  - Whether ...").
func memFileHasProp(help, prop string) bool {
	for _, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), prop+"=") {
			return true
		}
	}
	return false
}

// protectRAM makes a snapshot's RAM file root's and read-only, readable
// by QEMU's group only (protectShared): every clone of the snapshot maps
// it (through hard links, the same inode), so a VM whose QEMU could write
// it could rewrite the memory of every later clone. Without rom= (old
// QEMU) clones still open it read-write: it stays QEMU's user's.
func (r *Runtime) protectRAM(path string) error {
	if !r.romOff {
		return r.chown(path)
	}
	return r.protectShared(path)
}

// protectShared makes a file that VMs open only read-only, and that other
// VMs share through hard links (a snapshot's RAM file, its frozen disk
// layers), root's with mode 0440 and QEMU's group (0400 for a root QEMU):
// readable by every VM, writable by none.
func (r *Runtime) protectShared(path string) error {
	gid, mode := 0, os.FileMode(0o400)
	if r.uid >= 0 {
		gid, mode = r.gid, 0o440
	}
	if err := os.Chown(path, 0, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// majorVersion reads the major version off QEMU's version line
// ("QEMU emulator version 10.0.2 ..."); 0 if there is none.
func majorVersion(v string) int {
	_, rest, ok := strings.Cut(v, "version ")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(strings.SplitN(rest, ".", 2)[0])
	return n
}

// liveBranch reports whether a branch may pre-copy RAM while the source
// runs. KVM's dirty log is exact. Under TCG, QEMU 7.2 missed guest writes
// during a live pre-copy: children of a busy source resumed with RAM older
// than their device and CPU state and crashed ("scheduling while atomic",
// "VQ 1 ... Guest index inconsistent with Host index"); QEMU 10 does not
// (TestBranchBusyVM).
func (r *Runtime) liveBranch() bool { return r.cfg.Accel == "kvm" || r.major >= 10 }

// Destroy implements runtime.Runtime.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if !runtime.ValidID(id) {
		return nil
	}
	if c := r.takeAgentConn(id); c != nil {
		c.Close()
	}
	d := r.vmDir(id)
	// The VM's QEMU, and whatever vm.json does not name (a crash between
	// spawn and its write): found by the command line, which names the
	// VM's directory.
	for _, pid := range proc.Find(d.owns) {
		unix.Kill(pid, unix.SIGKILL)
		proc.WaitExit(pid, 5*time.Second)
	}
	var errs []error
	if err := cgroup.Remove(cgroup.Dirs(id)...); err != nil {
		errs = append(errs, err)
	}
	if err := netns.Delete(ctx, netns.Name(id, netnsRole)); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(d.shm); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Keep the directory: it is what List finds, so the teardown is
		// retried rather than something left behind unnamed.
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(d.path); err != nil {
		return err
	}
	// Its uid owns nothing any more (its processes are dead, its files
	// gone): free for the next VM.
	if r.uids != nil {
		r.uids.put(id)
	}
	return nil
}

// List implements runtime.Runtime.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && runtime.ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	// Namespaces and RAM files are named by id only and may belong to
	// another daemon's VMs: a lost directory is not looked for there.
	return ids, nil
}

// Close implements runtime.Runtime. QEMU's runtime holds nothing beyond
// its VMs, which keep running for the next daemon.
func (r *Runtime) Close() error { return nil }
