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
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/seriallink"
)

// Config configures the runtime.
type Config struct {
	Qemu  string // qemu-system-x86_64; default from PATH
	Dir   string // one directory per VM; absolute
	Accel string // "tcg" or "kvm"; default "tcg"
	// User, if set, is the unprivileged user QEMU runs as (its VM
	// directory and tap belong to it).
	User string
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
	kvmGid   int // supplementary group for /dev/kvm (0: none)
	major    int // QEMU's major version
	log      *slog.Logger

	mu sync.Mutex
	// agentConns holds the agent socket connections made while restoring,
	// each for the first Dial of its VM.
	agentConns map[string]net.Conn
}

var _ runtime.Runtime = (*Runtime)(nil)

// callTimeout bounds every helper command (qemu-img, ip).
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
	r := &Runtime{cfg: cfg, qemu: q, qemuImg: qi, uid: -1, gid: -1, log: cfg.Logger, agentConns: map[string]net.Conn{}}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.major = majorVersion(r.Version(context.Background()))
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
	return r, nil
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

func (r *Runtime) vmDir(id string) string { return filepath.Join(r.cfg.Dir, id) }

func nsName(id string) string { return "cove-" + id + "-v" }

// shmPath is where a snapshot builder keeps its RAM: tmpfs, where filling
// pages costs far less than in a disk-backed file. The name carries a
// hash of the state directory: ids are unique only within a daemon.
func (r *Runtime) shmPath(id string) string {
	h := sha256.Sum256([]byte(r.cfg.Dir))
	return fmt.Sprintf("/dev/shm/cove-%x-%s.mem", h[:4], id)
}

// vmState is what a VM's directory records about it (vm.json).
type vmState struct {
	ID        string   `json:"id"`
	Pid       int      `json:"pid"`
	MemPath   string   `json:"mem_path"`   // "": anonymous RAM
	MemShared bool     `json:"mem_shared"` // the VM owns MemPath (share=on)
	MemoryMiB int      `json:"memory_mib"`
	CPUs      int      `json:"cpus"`
	DiskSize  int64    `json:"disk_size"` // virtual size of the root disk
	Layers    []string `json:"layers"`    // qcow2 chain (all in the VM dir), oldest first; last is active
}

// snapState describes a checkpoint directory (snapshot.json).
type snapState struct {
	MemoryMiB   int      `json:"memory_mib"`
	CPUs        int      `json:"cpus"`
	MemInStream bool     `json:"mem_in_stream"` // RAM is in state.bin, not in mem
	DiskSize    int64    `json:"disk_size"`
	Layers      []string `json:"layers"` // hard links of the frozen chain; last is the top
	Live        bool     `json:"live"`
}

const (
	stateFile = "vm.json"
	snapFile  = "snapshot.json"
	stateBin  = "state.bin"
	memFile   = "mem"
)

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	return r.launch(ctx, spec, "")
}

// Restore implements runtime.Runtime.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, image string) error {
	return r.launch(ctx, spec, image)
}

func (r *Runtime) launch(ctx context.Context, spec runtime.Spec, snap string) (err error) {
	if !runtime.ValidID(spec.ID) {
		return fmt.Errorf("qemu: invalid sandbox id %q", spec.ID)
	}
	vf := spec.ImageFiles
	if !vmFilesExist(vf) {
		return fmt.Errorf("qemu: image %s has no VM artifacts: build them with `cove image build --vm`", filepath.Dir(spec.Rootfs))
	}
	var ss snapState
	if snap != "" {
		b, err := os.ReadFile(filepath.Join(snap, snapFile))
		if err != nil {
			return fmt.Errorf("qemu: snapshot %s: %w", snap, err)
		}
		if err := json.Unmarshal(b, &ss); err != nil {
			return fmt.Errorf("qemu: snapshot %s: %w", snap, err)
		}
	}
	dir := r.vmDir(spec.ID)
	if len(filepath.Join(dir, "qmp.sock")) >= 107 {
		return fmt.Errorf("qemu: state dir path too long for a unix socket: %s", dir)
	}
	// The directory comes first: it is what List finds.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			defer cancel()
			if derr := r.Destroy(cctx, spec.ID); derr != nil {
				r.log.Warn("cleanup after failed start", "id", spec.ID, "err", derr)
			}
		}
	}()
	if r.uid >= 0 {
		if err := os.Chown(dir, r.uid, r.gid); err != nil {
			return fmt.Errorf("qemu: %w", err)
		}
	}
	t0 := time.Now()
	if err := r.setupNetns(ctx, spec.ID); err != nil {
		return fmt.Errorf("qemu: network: %w", err)
	}
	tNet := time.Since(t0)
	st := vmState{ID: spec.ID, MemoryMiB: spec.MemoryMiB, CPUs: spec.CPUs}
	if snap == "" {
		fi, err := os.Stat(vf.Disk)
		if err != nil {
			return fmt.Errorf("qemu: %w", err)
		}
		st.DiskSize = fi.Size()
		st.Layers = []string{layerName(0)}
		// The image's disk is versioned and never changes in place: the
		// only backing file named by an absolute path.
		if err := r.qemuImgCreate(ctx, filepath.Join(dir, st.Layers[0]), vf.Disk, "raw", st.DiskSize); err != nil {
			return err
		}
	} else {
		st.MemoryMiB, st.CPUs, st.DiskSize = ss.MemoryMiB, ss.CPUs, ss.DiskSize
		if len(ss.Layers) == 0 {
			return fmt.Errorf("qemu: snapshot %s has no disk", snap)
		}
		// The VM holds hard links of the snapshot's whole chain, each
		// backed by the one below through a bare file name: the VM (and
		// any snapshot of it) needs nothing from the snapshot directory,
		// which may be deleted under it.
		for _, l := range ss.Layers {
			if err := linkOrCopy(filepath.Join(snap, l), filepath.Join(dir, l)); err != nil {
				return fmt.Errorf("qemu: %w", err)
			}
			// Snapshots made while QEMU ran as root hold root's files.
			if r.uid >= 0 {
				if err := os.Chown(filepath.Join(dir, l), r.uid, r.gid); err != nil {
					return fmt.Errorf("qemu: %w", err)
				}
			}
		}
		top := ss.Layers[len(ss.Layers)-1]
		st.Layers = append(append([]string(nil), ss.Layers...), layerName(nextLayer(ss.Layers)))
		if err := r.newTopLayer(ctx, snap, filepath.Join(dir, st.Layers[len(st.Layers)-1]), top, st.DiskSize); err != nil {
			return err
		}
	}
	layers := make([]string, len(st.Layers))
	for i, l := range st.Layers {
		layers[i] = filepath.Join(dir, l)
	}
	tDisk := time.Since(t0) - tNet
	if snap != "" && !ss.MemInStream {
		// A hard link in the VM's own directory: QEMU (maybe unprivileged)
		// needs no way into the snapshot directory, and the clone keeps
		// its RAM image if the snapshot is deleted under it.
		st.MemPath, st.MemShared = filepath.Join(dir, memFile), false
		if err := os.Link(filepath.Join(snap, memFile), st.MemPath); err != nil {
			st.MemPath = filepath.Join(snap, memFile)
		}
		if r.uid >= 0 {
			if err := os.Chown(st.MemPath, r.uid, r.gid); err != nil {
				return fmt.Errorf("qemu: %w", err)
			}
		}
	} else if snap == "" && spec.Golden {
		// A snapshot builder's RAM lives in a file the snapshot takes
		// whole: its clones map it copy-on-write.
		st.MemPath, st.MemShared = r.shmPath(spec.ID), true
	}
	// Every other VM's RAM is anonymous. A migration (a branch) reads every
	// page, and a restore reads every page the stream says is zero: in
	// tmpfs each such read of a hole allocates a page, so a branched VM and
	// each of its children held all of their RAM; anonymous memory maps
	// the zero page instead.
	if st.MemoryMiB <= 0 {
		st.MemoryMiB = 512
	}
	cfg := vmConfig{
		Dir: dir, Kernel: vf.Kernel, Initrd: vf.Initrd, Base: vf.Disk, Layers: layers,
		MemPath: st.MemPath, MemShared: st.MemShared, MemoryMiB: st.MemoryMiB, CPUs: st.CPUs,
		Accel: r.cfg.Accel, Hostname: spec.Hostname, ID: spec.ID, Incoming: snap != "", Sandbox: !r.cfg.NoSandbox,
	}
	if cfg.Hostname == "" {
		cfg.Hostname = spec.ID
	}
	if err := r.writeState(dir, st); err != nil {
		return err
	}
	launchStart := time.Now()
	pid, err := r.spawn(ctx, spec.ID, cfg)
	if err != nil {
		return err
	}
	st.Pid = pid
	if err := r.writeState(dir, st); err != nil {
		return err
	}
	if err := joinCgroup(spec.ID, pid, st.CPUs, st.MemoryMiB); err != nil {
		r.log.Warn("cgroup limits not applied", "id", spec.ID, "err", err)
	}
	q, err := r.waitQMP(ctx, dir, pid)
	if err != nil {
		return err
	}
	r.log.Debug("qemu up", "id", spec.ID, "netns", tNet, "disk", tDisk, "qmp_after", time.Since(launchStart))
	defer q.Close()
	if snap == "" {
		return nil
	}
	return r.incoming(ctx, q, spec, snap, ss)
}

// incoming loads a checkpoint into a VM started with -incoming defer and
// lets it run.
func (r *Runtime) incoming(ctx context.Context, q *qmp, spec runtime.Spec, snap string, ss snapState) error {
	t0 := time.Now()
	f, err := os.Open(filepath.Join(snap, stateBin))
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	defer f.Close()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.connectAgent(mctx, q, spec.ID); err != nil {
		return fmt.Errorf("qemu: restore: agent socket: %w", err)
	}
	if err := q.setCaps(mctx, map[string]bool{"x-ignore-shared": !ss.MemInStream, "pause-before-switchover": false}); err != nil {
		return fmt.Errorf("qemu: restore: %w", err)
	}
	// No self-announce after the load: by default QEMU has the guest send
	// gratuitous ARPs five times over half a second, each a round of
	// network and netlink code to translate (~700 TBs, 6% of the first
	// reply's), for a host side that is a new tap with nothing to learn.
	if err := q.Execute(mctx, "migrate-set-parameters", map[string]any{"announce-rounds": 0}, nil); err != nil {
		return fmt.Errorf("qemu: restore: %w", err)
	}
	if err := q.passFD(mctx, "state", f); err != nil {
		return fmt.Errorf("qemu: restore: %w", err)
	}
	if err := q.Execute(mctx, "migrate-incoming", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return fmt.Errorf("qemu: restore: %w", err)
	}
	if _, err := q.waitMigration(mctx, time.Millisecond, "completed"); err != nil {
		return fmt.Errorf("qemu: restore: %w: %s", err, r.tail(spec.ID))
	}
	if err := q.Execute(mctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("qemu: restore: %w", err)
	}
	// The clone shares its kernel's RNG state, its hostname and a stale
	// clock with every other clone of the snapshot: the service's Restored
	// call to the agent (seed, hostname, time) fixes that up.
	r.log.Debug("restored", "id", spec.ID, "migrate", time.Since(t0))
	return nil
}

// connectAgent connects to a VM's agent socket before its snapshot is
// loaded and keeps the connection for the first Dial.
//
// Connected before the load, the host is there all along as far as the
// guest can tell: it was when the snapshot was taken (the daemon held a
// connection), so the load tells the guest of no hang-up, and the first
// reply waits for no reconnection. And a snapshot taken while the guest
// wrote to the host carries that write with it: QEMU flushes it as the
// clone resumes, and with nobody connected it would throttle the port for
// good (x-query-virtio-queue-status: the output queue stays "inuse"), so
// the guest's output would never reach the daemon. Connected, the stale
// write arrives here, of an old epoch, and seriallink's client skips it.
// The QMP round trip lets QEMU accept the connection: it takes one at a
// time, and one it has not accepted is not there for the load.
func (r *Runtime) connectAgent(ctx context.Context, q *qmp, id string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(r.vmDir(id), agentSock))
	if err != nil {
		return err
	}
	if err := q.Execute(ctx, "query-status", nil, nil); err != nil {
		c.Close()
		return err
	}
	r.mu.Lock()
	r.agentConns[id] = c // a VM is restored once: its directory is new
	r.mu.Unlock()
	return nil
}

// takeAgentConn returns the connection connectAgent kept for id, if any.
func (r *Runtime) takeAgentConn(id string) net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.agentConns[id]
	delete(r.agentConns, id)
	return c
}

// spawn starts QEMU inside the VM's network namespace and returns its pid.
func (r *Runtime) spawn(ctx context.Context, id string, cfg vmConfig) (int, error) {
	log, err := os.OpenFile(filepath.Join(cfg.Dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	defer log.Close()
	tap, err := openTap(nsName(id))
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	defer tap.Close()
	cfg.TapFD = 3 // the first of ExtraFiles
	args := []string{"netns", "exec", nsName(id)}
	if r.uid >= 0 {
		groups := "--clear-groups"
		if r.kvmGid > 0 {
			groups = "--groups=" + strconv.Itoa(r.kvmGid)
		}
		args = append(args, "setpriv", "--reuid="+strconv.Itoa(r.uid), "--regid="+strconv.Itoa(r.gid),
			groups, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs")
	}
	args = append(append(args, r.qemu), cfg.args()...)
	// Not CommandContext: the VM outlives this call (and this daemon).
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{tap}
	cmd.Dir = cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("qemu: start: %w", err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() // reap; a restarted daemon leaves that to init
	return pid, nil
}

// waitQMP connects to a starting VM's QMP socket.
func (r *Runtime) waitQMP(ctx context.Context, dir string, pid int) (*qmp, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	sock := filepath.Join(dir, "qmp.sock")
	for {
		if _, err := os.Stat(sock); err == nil {
			q, err := dialQMP(ctx, sock)
			if err == nil {
				return q, nil
			}
		}
		if !alive(pid) {
			return nil, fmt.Errorf("qemu: exited at start: %s", tailFile(filepath.Join(dir, "qemu.log")))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qemu: no QMP socket: %w: %s", ctx.Err(), tailFile(filepath.Join(dir, "qemu.log")))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is dead.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func (r *Runtime) qemuImgCreate(ctx context.Context, path, backing, backingFmt string, size int64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// -u: the size is known, so qemu-img need not open the whole chain.
	cmd := exec.CommandContext(ctx, r.qemuImg, "create", "-q", "-u", "-f", "qcow2", "-F", backingFmt,
		"-b", backing, "-o", "lazy_refcounts=on", path, strconv.FormatInt(size, 10))
	cmd.Dir = filepath.Dir(path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	if r.uid >= 0 {
		return os.Chown(path, r.uid, r.gid)
	}
	return nil
}

func (r *Runtime) setupNetns(ctx context.Context, id string) error {
	ns := nsName(id)
	if err := netns.IP(ctx, "", nil, "netns", "add", ns); err != nil {
		return err
	}
	owner := ""
	if r.uid >= 0 {
		owner = fmt.Sprintf(" user %d group %d", r.uid, r.gid)
	}
	cmds := fmt.Sprintf("tuntap add dev %s mode tap%s\nlink set %s address %s mtu %d\naddr add %s dev %s\nlink set %s up\nlink set lo up\n",
		tapName, owner, tapName, hostMAC, mtu, hostAddr, tapName, tapName)
	return netns.IP(ctx, ns, strings.NewReader(cmds), "-batch", "-")
}

func (r *Runtime) writeState(dir string, st vmState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

func (r *Runtime) readState(id string) (vmState, error) {
	var st vmState
	b, err := os.ReadFile(filepath.Join(r.vmDir(id), stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, runtime.ErrNotFound
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// Dial implements runtime.Runtime.
func (r *Runtime) Dial(ctx context.Context, id string) (net.Conn, error) {
	if !runtime.ValidID(id) {
		return nil, fmt.Errorf("qemu: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	if c := r.takeAgentConn(id); c != nil {
		return seriallink.Client(c)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(r.vmDir(id), agentSock))
	if err == nil {
		return seriallink.Client(c)
	}
	// A guest that panicked ends its QEMU (-no-reboot): say so, with what
	// its console said last, rather than let the caller wait for it.
	if st, serr := r.readState(id); serr == nil && st.Pid > 0 && !alive(st.Pid) {
		return nil, fmt.Errorf("qemu: sandbox %s: %w: console: %s", id, runtime.ErrExited, tailFile(filepath.Join(r.vmDir(id), "console.log")))
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("qemu: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	return nil, fmt.Errorf("qemu: %w", err)
}

// Checkpoint implements runtime.Runtime.
//
// Without leaveRunning (a golden snapshot) the VM is stopped, its device
// state migrated into image/state.bin and it quits; its RAM file (when it
// owns one) and its qcow2 chain are hard-linked into image. With
// leaveRunning, RAM is pre-copied into state.bin while the VM runs; at the
// switch-over the VM's active overlay is frozen and a new one stacked on
// it, so the source and the snapshot's children diverge; then it resumes.
func (r *Runtime) Checkpoint(ctx context.Context, id, image string, leaveRunning bool) (time.Duration, error) {
	if !runtime.ValidID(id) {
		return 0, runtime.ErrNotFound
	}
	st, err := r.readState(id)
	if err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	dir := r.vmDir(id)
	if err := os.MkdirAll(image, 0o755); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	q, err := dialQMP(ctx, filepath.Join(dir, "qmp.sock"))
	if err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	defer q.Close()
	mctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := r.settleLayers(mctx, q, &st); err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	// The migration thread's work is the runtime's, not the guest's: at
	// the sandbox's own quota its cgroup was throttled 2–3 times a branch,
	// ~90–200 ms in all, which slowed the running source and, when it fell
	// in the switch-over, stopped it ~45 ms longer. One CPU more meanwhile.
	if restore, err := cgroup.RaiseCPUQuota(cgroupDirs(id)...); err == nil {
		defer restore()
	}
	out, err := os.OpenFile(filepath.Join(image, stateBin), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	defer out.Close()
	if err := q.Execute(mctx, "migrate-set-parameters", map[string]any{
		"max-bandwidth": int64(64) << 30, "downtime-limit": 5,
	}, nil); err != nil {
		return 0, fmt.Errorf("qemu: checkpoint: %w", err)
	}
	ss := snapState{MemoryMiB: st.MemoryMiB, CPUs: st.CPUs, DiskSize: st.DiskSize, Live: leaveRunning}
	var pause time.Duration
	if leaveRunning {
		pause, err = r.liveCheckpoint(mctx, q, &st, out)
		ss.MemInStream = true
	} else {
		ss.MemInStream = !st.MemShared
		pause, err = r.goldenCheckpoint(mctx, q, st, out, !ss.MemInStream)
	}
	if err != nil {
		return 0, fmt.Errorf("qemu: checkpoint %s: %w: %s", id, err, r.tail(id))
	}
	if err := out.Sync(); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	// The frozen layers: every layer below the active one, and with it
	// when the VM stopped for good.
	frozen := st.Layers[:len(st.Layers)-1]
	if !leaveRunning {
		frozen = st.Layers
	}
	for _, l := range frozen {
		if err := linkOrCopy(filepath.Join(dir, l), filepath.Join(image, l)); err != nil {
			return 0, fmt.Errorf("qemu: %w", err)
		}
		// The VM's disk skips flushes (diskOpts): what a snapshot keeps
		// is made durable here, with the source running again.
		if err := syncFile(filepath.Join(image, l)); err != nil {
			return 0, fmt.Errorf("qemu: %w", err)
		}
	}
	ss.Layers = append([]string(nil), frozen...)
	if !ss.MemInStream {
		if err := linkOrCopy(st.MemPath, filepath.Join(image, memFile)); err != nil {
			return 0, fmt.Errorf("qemu: %w", err)
		}
		// QEMU 7.2 opens a memory-backend-file read-write even for a
		// private mapping (it never writes it): clones, running as the
		// QEMU user, must be able to.
		if r.uid >= 0 {
			if err := os.Chown(filepath.Join(image, memFile), r.uid, r.gid); err != nil {
				return 0, fmt.Errorf("qemu: %w", err)
			}
		}
	}
	// Every child's new top layer is the same empty overlay of the
	// snapshot's top (named by its bare file name): made once here, copied
	// at each restore rather than running qemu-img (~10 ms) every time.
	if len(ss.Layers) > 0 {
		if err := r.qemuImgCreate(ctx, filepath.Join(image, overlayTemplate), ss.Layers[len(ss.Layers)-1], "qcow2", ss.DiskSize); err != nil {
			r.log.Warn("no overlay template: children run qemu-img", "err", err)
		}
	}
	b, _ := json.Marshal(ss)
	if err := os.WriteFile(filepath.Join(image, snapFile), b, 0o644); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	if leaveRunning {
		if err := r.flatten(ctx, q, &st); err != nil {
			r.log.Warn("layers not flattened", "id", id, "err", err)
		}
	}
	return pause, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// overlayTemplate is a snapshot's empty overlay of its top layer.
const overlayTemplate = "overlay.qcow2"

// newTopLayer makes path an empty qcow2 overlay of top (a bare name in
// the same directory): a copy of the snapshot's template when it has one.
func (r *Runtime) newTopLayer(ctx context.Context, snap, path, top string, size int64) error {
	if err := copyFile(filepath.Join(snap, overlayTemplate), path); err == nil {
		if r.uid >= 0 {
			return os.Chown(path, r.uid, r.gid)
		}
		return nil
	}
	os.Remove(path)
	return r.qemuImgCreate(ctx, path, top, "qcow2", size)
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

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (r *Runtime) goldenCheckpoint(ctx context.Context, q *qmp, st vmState, out *os.File, ignoreShared bool) (time.Duration, error) {
	t0 := time.Now()
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return 0, err
	}
	if err := q.setCaps(ctx, map[string]bool{"x-ignore-shared": ignoreShared, "pause-before-switchover": false}); err != nil {
		return 0, err
	}
	if err := q.passFD(ctx, "state", out); err != nil {
		return 0, err
	}
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return 0, err
	}
	if _, err := q.waitMigration(ctx, 20*time.Millisecond, "completed"); err != nil {
		return 0, err
	}
	// The VM is done: quit, so nothing writes its RAM file or disk again.
	q.Execute(ctx, "quit", nil, nil)
	waitExit(st.Pid, 10*time.Second)
	if alive(st.Pid) {
		unix.Kill(st.Pid, unix.SIGKILL)
		waitExit(st.Pid, 5*time.Second)
	}
	return time.Since(t0), nil
}

func (r *Runtime) liveCheckpoint(ctx context.Context, q *qmp, st *vmState, out *os.File) (_ time.Duration, err error) {
	dir := r.vmDir(st.ID)
	// The next active overlay, made before the pause: backed by the current
	// one through a relative name, so a later snapshot's hard links of the
	// whole chain resolve within the snapshot directory.
	cur := st.Layers[len(st.Layers)-1]
	next := layerName(nextLayer(st.Layers))
	nextPath := filepath.Join(dir, next)
	os.Remove(nextPath)
	if err := r.qemuImgCreate(ctx, nextPath, cur, "qcow2", st.DiskSize); err != nil {
		return 0, err
	}
	// Opened now, while the source runs: at the switch-over stacking it is
	// then one graph change, not a file to open and probe.
	nextNode := nodeName(nextLayer(st.Layers))
	cache, file := diskCache()
	file["driver"], file["filename"] = "file", nextPath
	if err := q.Execute(ctx, "blockdev-add", map[string]any{
		"driver": "qcow2", "node-name": nextNode, "backing": nil, "cache": cache, "file": file,
	}, nil); err != nil {
		return 0, fmt.Errorf("open the next overlay: %w", err)
	}
	added := true
	defer func() {
		if added {
			q.Execute(context.WithoutCancel(ctx), "blockdev-del", map[string]any{"node-name": nextNode}, nil)
		}
	}()
	// Where the copy cannot run live, the source stops for all of it:
	// correct, at the cost of a pause that grows with its RAM.
	var stopped time.Time
	if !r.liveBranch() {
		stopped = time.Now()
		if err := q.Execute(ctx, "stop", nil, nil); err != nil {
			return 0, err
		}
	}
	resume := func() { q.Execute(context.WithoutCancel(ctx), "cont", nil, nil) }
	if err := q.setCaps(ctx, map[string]bool{"x-ignore-shared": false, "pause-before-switchover": true, "events": true}); err != nil {
		resume()
		return 0, err
	}
	if err := q.passFD(ctx, "state", out); err != nil {
		resume()
		return 0, err
	}
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": "fd:state"}, nil); err != nil {
		resume()
		return 0, err
	}
	// Pre-copy until the VM stops for the switch-over, told by QEMU's
	// event rather than polled for: every step from here is the pause.
	migrationEnd := []string{"MIGRATION:failed", "MIGRATION:cancelled"}
	relax := time.Now().Add(5 * time.Second)
	for {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if !relax.IsZero() {
			wctx, cancel = context.WithDeadline(ctx, relax)
		}
		ev, err := q.awaitEvent(wctx, append(migrationEnd, "MIGRATION:pre-switchover")...)
		cancel()
		if err == nil && ev != "MIGRATION:pre-switchover" {
			resume()
			return 0, migrationFailed(ctx, q, ev)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			q.Execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
			resume()
			return 0, ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) || relax.IsZero() {
			resume()
			return 0, err
		}
		// A busy guest dirties RAM faster than it can be copied in the
		// downtime asked for: accept a longer pause rather than none.
		q.Execute(ctx, "migrate-set-parameters", map[string]any{"downtime-limit": 2000}, nil)
		relax = time.Time{}
	}
	if stopped.IsZero() {
		stopped = time.Now()
	}
	// The VM is stopped and its disk still active: freeze the current
	// overlay and stack the new one on it.
	if err := q.Execute(ctx, "blockdev-snapshot", map[string]any{"node": activeNode(st), "overlay": nextNode}, nil); err != nil {
		q.Execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
		resume()
		return 0, err
	}
	added = false
	st.Layers = append(st.Layers, next)
	// Recorded once the source runs again (or failed to), whatever happens
	// from here: the new layer is what it writes to now.
	defer func() {
		if werr := r.writeState(dir, *st); err == nil {
			err = werr
		}
	}()
	if err := q.Execute(ctx, "migrate-continue", map[string]any{"state": "pre-switchover"}, nil); err != nil {
		resume()
		return 0, err
	}
	// The source stands still until this completes.
	ev, err := q.awaitEvent(ctx, append(migrationEnd, "MIGRATION:completed")...)
	if err == nil && ev != "MIGRATION:completed" {
		err = migrationFailed(ctx, q, ev)
	}
	if err != nil {
		resume()
		return 0, err
	}
	if err := contAfterMigration(ctx, q); err != nil {
		return 0, err
	}
	r.logSwitchover(q, st.ID)
	return pausedFor(q, stopped), nil
}

// migrationFailed is the error of a migration that ended with event ev.
func migrationFailed(ctx context.Context, q *qmp, ev string) error {
	var ms migrationStatus
	q.Execute(ctx, "query-migrate", nil, &ms)
	return fmt.Errorf("migration %s: %s", strings.TrimPrefix(ev, "MIGRATION:"), ms.ErrorDesc)
}

// contAfterMigration resumes a VM whose outgoing migration has completed.
// QEMU reports "completed" a moment before it leaves the finish-migrate
// state, in which it refuses cont: that refusal is retried.
func contAfterMigration(ctx context.Context, q *qmp) error {
	for {
		err := q.Execute(ctx, "cont", nil, nil)
		var qe *qmpError
		if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "not finalized") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// logSwitchover logs, at debug level, when each step of a switch-over
// ended, from QEMU's STOP on, by the timestamps of its events.
func (r *Runtime) logSwitchover(q *qmp, id string) {
	stop, ok := q.lastEvent("STOP")
	if !ok {
		return
	}
	args := []any{"id", id}
	for _, ev := range []string{"MIGRATION:pre-switchover", "MIGRATION:device", "MIGRATION:completed", "RESUME"} {
		if t, ok := q.lastEvent(ev); ok && !t.Before(stop) {
			args = append(args, strings.ToLower(strings.TrimPrefix(ev, "MIGRATION:")), t.Sub(stop))
		}
	}
	r.log.Debug("switch-over", args...)
}

// pausedFor is how long the source's vCPUs stood still: from QEMU's STOP
// event to its RESUME (sent before cont's reply), as QEMU stamped them.
// That covers what the runtime cannot see, such as the stop's drain of the
// disks, and is not blurred by polling. Without both events it is the
// time since the runtime saw the VM stopped.
func pausedFor(q *qmp, stopped time.Time) time.Duration {
	stop, ok1 := q.lastEvent("STOP")
	resume, ok2 := q.lastEvent("RESUME")
	if ok1 && ok2 && resume.After(stop) {
		return resume.Sub(stop)
	}
	return time.Since(stopped)
}

// layerName is the file of layer i of a VM's qcow2 chain. Each new layer
// takes the number after the highest in its chain, so names are unique
// within a chain (a flattened chain skips numbers) and hard links of a
// whole chain never collide.
func layerName(i int) string { return fmt.Sprintf("disk-%d.qcow2", i) }

// layerIndex is the number in a layerName.
func layerIndex(name string) int {
	var i int
	fmt.Sscanf(name, "disk-%d.qcow2", &i)
	return i
}

// nextLayer is the number of the layer to stack on a chain.
func nextLayer(layers []string) int {
	n := 0
	for _, l := range layers {
		n = max(n, layerIndex(l)+1)
	}
	return n
}

// nodeName is the block node of layer i: "root" for the first.
func nodeName(i int) string {
	if i == 0 {
		return "root"
	}
	return "root" + strconv.Itoa(i)
}

func activeNode(st *vmState) string { return nodeName(layerIndex(st.Layers[len(st.Layers)-1])) }

func waitExit(pid int, d time.Duration) {
	for deadline := time.Now().Add(d); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// Destroy implements runtime.Runtime.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if !runtime.ValidID(id) {
		return nil
	}
	if c := r.takeAgentConn(id); c != nil {
		c.Close()
	}
	dir := r.vmDir(id)
	if st, err := r.readState(id); err == nil && st.Pid > 0 && ownsPid(st.Pid, dir) {
		unix.Kill(st.Pid, unix.SIGKILL)
		waitExit(st.Pid, 5*time.Second)
	}
	// Whatever the pid missed (a crash between spawn and vm.json): found
	// by its command line, which names the VM's directory.
	for _, pid := range pidsNaming(dir) {
		unix.Kill(pid, unix.SIGKILL)
		waitExit(pid, 5*time.Second)
	}
	var errs []error
	if err := removeCgroup(id); err != nil {
		errs = append(errs, err)
	}
	if netns.Exists(nsName(id)) {
		if err := netns.IP(ctx, "", nil, "netns", "delete", nsName(id)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(r.shmPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Keep the directory: it is what List finds, so the teardown is
		// retried rather than something left behind unnamed.
		return errors.Join(errs...)
	}
	return os.RemoveAll(dir)
}

// ownsPid reports whether pid is a QEMU whose command line names dir.
func ownsPid(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), dir+"/")
}

func pidsNaming(dir string) []int {
	procs, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		if ownsPid(pid, dir) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// List implements runtime.Runtime.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && runtime.ValidID(e.Name()) {
			seen[e.Name()] = true
			ids = append(ids, e.Name())
		}
	}
	// Namespaces and RAM files are named by id only and may belong to
	// another daemon's VMs: a lost directory is not looked for there.
	return ids, nil
}

// Close implements nothing for QEMU: VMs keep running for the next daemon.
func (r *Runtime) Close() error { return nil }

func (r *Runtime) tail(id string) string {
	return tailFile(filepath.Join(r.vmDir(id), "qemu.log"))
}

func tailFile(p string) string {
	b, _ := os.ReadFile(p)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}

// linkOrCopy hard-links src to dst, copying across filesystems.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", "--", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, out)
	}
	return nil
}
