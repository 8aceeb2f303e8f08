package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Start implements runtime.Runtime: a cold boot.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	return r.newLaunch(spec, "").run(ctx, coldBoot)
}

// Restore implements runtime.Runtime: a new VM that goes on from where a
// checkpoint left its VM.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, image string) error {
	return r.newLaunch(spec, snapDir(image)).run(ctx, fromSnapshot)
}

// A launch's steps, in order. A restore reads its checkpoint first, makes
// the disk and the RAM from it, and loads it into the VM last; every other
// step is a cold boot's.
var (
	coldBoot = []step{
		{"check", (*launch).check},
		{"uid", (*launch).takeUID},
		{"dir", (*launch).makeDir},
		{"netns", (*launch).makeNetns},
		{"disk", (*launch).newDisk},
		{"memory", (*launch).newMemory},
		{"qemu", (*launch).startQEMU},
		{"qmp", (*launch).connectQMP},
	}
	fromSnapshot = []step{
		{"check", (*launch).check},
		{"uid", (*launch).takeUID},
		{"snapshot", (*launch).readSnapshot},
		{"dir", (*launch).makeDir},
		{"netns", (*launch).makeNetns},
		{"disk", (*launch).linkDisk},
		{"memory", (*launch).linkMemory},
		{"qemu", (*launch).startQEMU},
		{"qmp", (*launch).connectQMP},
		{"incoming", (*launch).incoming},
	}
)

// step is one named step of a launch.
type step struct {
	name string
	fn   func(*launch, context.Context) error
}

// launch is a VM being started: what its steps have found and made.
type launch struct {
	r    *Runtime
	spec runtime.Spec
	snap snapDir   // the checkpoint restored; "" for a cold boot
	ss   snapState // what snap describes
	dir  vmDir
	st   vmState // what the VM's directory will record
	made bool    // the directory exists: a failure destroys the VM
	q    *qmp    // QEMU, once it is up
}

func (r *Runtime) newLaunch(spec runtime.Spec, snap snapDir) *launch {
	return &launch{
		r: r, spec: spec, snap: snap, dir: r.vmDir(spec.ID),
		st: vmState{ID: spec.ID, MemoryMiB: spec.MemoryMiB, CPUs: spec.CPUs},
	}
}

// run runs steps in order and logs, at debug level, how long each took.
// On error, nothing is left behind.
func (l *launch) run(ctx context.Context, steps []step) (err error) {
	defer func() {
		if l.q != nil {
			l.q.Close()
		}
		if err != nil && l.made {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			defer cancel()
			if derr := l.r.Destroy(cctx, l.spec.ID); derr != nil {
				l.r.log.Warn("cleanup after failed start", "id", l.spec.ID, "err", derr)
			}
		} else if err != nil && l.r.uids != nil {
			l.r.uids.put(l.spec.ID) // nothing was made with it
		}
	}()
	took := []any{"id", l.spec.ID}
	for _, s := range steps {
		t0 := time.Now()
		if err := s.fn(l, ctx); err != nil {
			return err
		}
		took = append(took, s.name, time.Since(t0))
	}
	l.r.log.Debug("launched", took...)
	return nil
}

// check refuses, before anything is made, a spec no VM can start from.
func (l *launch) check(ctx context.Context) error {
	if !runtime.ValidID(l.spec.ID) {
		return fmt.Errorf("qemu: invalid sandbox id %q", l.spec.ID)
	}
	if !vmFilesExist(l.spec.ImageFiles) {
		return fmt.Errorf("qemu: image %s has no VM artifacts: build them with `cove image build --vm`", filepath.Dir(l.spec.Rootfs))
	}
	for _, sock := range []string{l.dir.qmpSock(), l.dir.agentSock()} {
		if len(sock) >= 107 {
			return fmt.Errorf("qemu: state dir path too long for a unix socket: %s", l.dir.path)
		}
	}
	return nil
}

// takeUID gives the VM a uid of its own, with one uid per VM (before its
// directory, which is given to that uid and tells a restarted daemon).
func (l *launch) takeUID(ctx context.Context) error {
	if l.r.uids == nil {
		return nil
	}
	uid, err := l.r.uids.get(l.spec.ID)
	if err != nil {
		return err
	}
	l.r.log.Debug("VM uid", "id", l.spec.ID, "uid", uid)
	return nil
}

// readSnapshot reads what the checkpoint describes: the clone runs with
// its VM's memory, CPUs and disk.
func (l *launch) readSnapshot(ctx context.Context) error {
	ss, err := l.snap.read()
	if err != nil {
		return fmt.Errorf("qemu: snapshot %s: %w", l.snap, err)
	}
	if len(ss.Layers) == 0 {
		return fmt.Errorf("qemu: snapshot %s has no disk", l.snap)
	}
	l.ss = ss
	l.st.MemoryMiB, l.st.CPUs, l.st.DiskSize = ss.MemoryMiB, ss.CPUs, ss.DiskSize
	return nil
}

// makeDir makes the VM's directory, before anything else the VM holds:
// it is what List finds.
func (l *launch) makeDir(ctx context.Context) error {
	if err := os.Mkdir(l.dir.path, 0o700); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	l.made = true
	if err := l.r.chown(l.dir.path); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return nil
}

// newDisk makes a cold VM's one layer, an overlay of the image's disk.
// That disk is versioned and never changes in place: the only backing file
// named by an absolute path. The overlay is larger than the image by the
// sandbox's disk size (diskSize): the guest's agent grows the root
// filesystem to fill it, so that is the space the guest can write, and
// the overlay's file can grow no larger than the disk it stands for.
func (l *launch) newDisk(ctx context.Context) error {
	size, err := diskSize(l.spec.Disk, l.spec.DiskMiB)
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	l.st.DiskSize = size
	l.st.Layers = []string{layerName(0)}
	return l.r.qemuImgCreate(ctx, l.dir.layer(l.st.Layers[0]), l.spec.Disk, "raw", l.st.DiskSize)
}

// linkDisk gives a clone hard links of its snapshot's whole chain, each
// backed by the one below through a bare file name, and a new layer on
// top: the VM (and any snapshot of it) needs nothing from the snapshot
// directory, which may be deleted under it.
func (l *launch) linkDisk(ctx context.Context) error {
	for _, name := range l.ss.Layers {
		dst := l.dir.layer(name)
		// The clone opens it read-only, as do the snapshot's other
		// children: readable by QEMU's group, writable by none (also a
		// snapshot saved before layers were protected, fixed here).
		if err := l.r.protectShared(l.snap.layer(name)); err != nil {
			return fmt.Errorf("qemu: %w", err)
		}
		if err := fsutil.LinkOrCopy(ctx, l.snap.layer(name), dst); err != nil {
			return fmt.Errorf("qemu: %w", err)
		}
		if err := l.r.protectShared(dst); err != nil { // a copy
			return fmt.Errorf("qemu: %w", err)
		}
	}
	top := l.ss.Layers[len(l.ss.Layers)-1]
	l.st.Layers = append(append([]string(nil), l.ss.Layers...), layerName(nextLayer(l.ss.Layers)))
	return l.r.newTopLayer(ctx, l.snap, l.dir.layer(l.st.Layers[len(l.st.Layers)-1]), top, l.st.DiskSize)
}

// newMemory puts a snapshot builder's RAM in a file the snapshot takes
// whole: its clones map it copy-on-write.
//
// Every other VM's RAM is anonymous. A migration (a branch) reads every
// page, and a restore reads every page the stream says is zero: in tmpfs
// each such read of a hole allocates a page, so a branched VM and each of
// its children held all of their RAM; anonymous memory maps the zero page
// instead.
func (l *launch) newMemory(ctx context.Context) error {
	if l.spec.Golden {
		l.st.MemPath, l.st.MemShared = l.dir.shm, true
	}
	return nil
}

// linkMemory maps a golden snapshot's RAM file privately into its clone,
// through a hard link in the VM's own directory: QEMU (maybe unprivileged)
// needs no way into the snapshot directory, and the clone keeps its RAM
// image if the snapshot is deleted under it. Where no link can be made
// (snapshots on another filesystem) the clone gets a sparse copy, never
// the snapshot's own path. A branch's RAM is in its stream: the clone's
// is anonymous.
func (l *launch) linkMemory(ctx context.Context) error {
	if l.ss.MemInStream {
		return nil
	}
	l.st.MemPath, l.st.MemShared = l.dir.mem(), false
	// A snapshot saved before RAM files were protected has one QEMU's
	// user owns: protected here, before any clone links it.
	if err := l.r.protectRAM(l.snap.mem()); err != nil {
		return fmt.Errorf("qemu: the snapshot's RAM file: %w", err)
	}
	if err := fsutil.LinkOrCopy(ctx, l.snap.mem(), l.st.MemPath); err != nil {
		return fmt.Errorf("qemu: the clone's RAM file: %w", err)
	}
	// A copy (another filesystem) is protected the same way.
	if err := l.r.protectRAM(l.st.MemPath); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return nil
}

// startQEMU starts the VM's QEMU, recording the VM's state before (for
// the teardown of a VM whose QEMU never ran) and after (with its pid).
func (l *launch) startQEMU(ctx context.Context) error {
	if l.st.MemoryMiB <= 0 {
		l.st.MemoryMiB = 512
	}
	cfg := vmConfig{
		Dir: l.dir, Kernel: l.spec.Kernel, Initrd: l.spec.Initrd, Base: l.spec.Disk, Layers: l.dir.layers(l.st.Layers),
		MemPath: l.st.MemPath, MemShared: l.st.MemShared, MemReadonly: l.r.romOff, MemoryMiB: l.st.MemoryMiB, CPUs: l.st.CPUs,
		Accel: l.r.cfg.Accel, Hostname: l.spec.Hostname, ID: l.spec.ID, Incoming: l.snap != "", Sandbox: !l.r.cfg.NoSandbox,
		Pids: l.spec.Pids, OpenFiles: l.spec.OpenFiles,
	}
	if cfg.Hostname == "" {
		cfg.Hostname = l.spec.ID
	}
	if err := l.dir.writeState(l.st); err != nil {
		return err
	}
	pid, err := l.r.spawn(cfg)
	if err != nil {
		return err
	}
	l.st.Pid = pid
	if err := l.dir.writeState(l.st); err != nil {
		return err
	}
	if err := joinCgroup(l.spec.ID, pid, l.st.CPUs, l.st.MemoryMiB); err != nil {
		l.r.log.Warn("cgroup limits not applied", "id", l.spec.ID, "err", err)
	}
	return nil
}

// spawn starts QEMU inside the VM's network namespace and returns its pid.
func (r *Runtime) spawn(cfg vmConfig) (int, error) {
	log, err := os.OpenFile(cfg.Dir.qemuLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	defer log.Close()
	ns := netns.Name(cfg.ID, netnsRole)
	tap, err := openTap(ns)
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	defer tap.Close()
	cfg.TapFD = 3 // the first of ExtraFiles
	args := []string{"netns", "exec", ns}
	if uid, gid, extra := r.qemuUser(cfg.ID); uid >= 0 {
		if r.kvmGid > 0 {
			extra = append(extra, r.kvmGid)
		}
		groups := "--clear-groups"
		if len(extra) > 0 {
			s := make([]string, len(extra))
			for i, g := range extra {
				s[i] = strconv.Itoa(g)
			}
			groups = "--groups=" + strings.Join(s, ",")
		}
		args = append(args, "setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(gid),
			groups, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs")
	}
	args = append(append(args, r.qemu), cfg.args()...)
	// Not CommandContext: the VM outlives this call (and this daemon).
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{tap}
	cmd.Dir = cfg.Dir.path
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("qemu: start: %w", err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() // reap; a restarted daemon leaves that to init
	return pid, nil
}

// connectQMP connects to the starting QEMU's QMP socket.
func (l *launch) connectQMP(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	sock := l.dir.qmpSock()
	for {
		if _, err := os.Stat(sock); err == nil {
			q, err := dialQMP(ctx, sock)
			if err == nil {
				l.q = q
				return nil
			}
		}
		if !proc.Alive(l.st.Pid) {
			return fmt.Errorf("qemu: exited at start: %s", l.dir.tail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qemu: no QMP socket: %w: %s", ctx.Err(), l.dir.tail())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// incoming loads the checkpoint into the VM, started with -incoming
// defer, and lets it run.
func (l *launch) incoming(ctx context.Context) error {
	q := l.q
	f, err := os.Open(l.snap.stateBin())
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	defer f.Close()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := l.r.connectAgent(mctx, q, l.spec.ID); err != nil {
		return fmt.Errorf("qemu: restore: agent socket: %w", err)
	}
	if err := q.setCaps(mctx, map[string]bool{"x-ignore-shared": !l.ss.MemInStream, "pause-before-switchover": false}); err != nil {
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
		return fmt.Errorf("qemu: restore: %w: %s", err, l.dir.tail())
	}
	// The clone shares its kernel's RNG state, its hostname and a stale
	// clock with every other clone of the snapshot: the service's Restored
	// call to the agent (seed, hostname, time) fixes that up.
	if err := q.Execute(mctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("qemu: restore: %w", err)
	}
	return nil
}
