package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/netns"
)

// machineRev names the revision of the machine args builds. A snapshot
// restores only into the machine it was taken on, so it is part of the
// runtime's version, which every snapshot records.
const machineRev = "microvm-2"

// vmConfig is everything the QEMU command line depends on.
type vmConfig struct {
	Dir       vmDir // the VM's own directory: sockets, logs, overlay
	Kernel    string
	Initrd    string
	Base      string   // the image's raw disk, which the chain's first layer is backed by
	Layers    []string // the VM's qcow2 chain, oldest first; the last is active
	MemPath   string   // memory-backend-file path; "": anonymous RAM
	MemShared bool     // share=on (the VM owns MemPath) or a private CoW mapping
	// MemReadonly opens MemPath read-only (readonly=on) while the guest
	// still writes its RAM, privately (rom=off): a clone's view of the
	// RAM file its snapshot's other clones map too.
	MemReadonly bool
	MemoryMiB   int
	CPUs        int
	Accel       string // "tcg" or "kvm"
	Hostname    string
	ID          string
	// The agent's bounds inside the guest (cove.pids=, cove.nofile=); zero
	// is none. A restored guest keeps its snapshot's.
	Pids, OpenFiles int
	Incoming        bool // -incoming defer: wait for migrate-incoming
	Sandbox         bool // -sandbox on,...
	TapFD           int  // if > 0, the tap's queue QEMU inherits; else QEMU opens tap0
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// kernelVerbosity is "quiet" unless COVE_QEMU_DEBUG is set.
var kernelVerbosity = func() string {
	if os.Getenv("COVE_QEMU_DEBUG") != "" {
		return "earlyprintk=ttyS0 loglevel=7"
	}
	return "quiet"
}()

// args builds QEMU's command line: a microvm with the kernel booted
// directly, virtio-mmio disk, network, RNG and agent port, RAM in a file. (QEMU 10
// boots an ELF vmlinux through its PVH option ROM: option ROMs stay on.)
//
// No 8259 PIC (pic=off): the guest routes every interrupt through the
// IOAPIC and never programs the PIC, which stays at vector base 0, so a
// legacy interrupt pending when the kernel first enables interrupts
// arrives as vector 0 and kills it with a "divide error" in start_kernel
// (Debian's 6.1.192 cloud kernel: a third of boots under TCG here).
func (c vmConfig) args() []string {
	cpu := "max"
	accel := "tcg,tb-size=256"
	if c.Accel == "kvm" {
		cpu, accel = "host,-arch-capabilities", "kvm"
	}
	a := []string{
		"-M", "microvm,isa-serial=on,rtc=on,pic=off,memory-backend=mem",
		"-accel", accel,
		"-cpu", cpu,
		"-m", strconv.Itoa(c.MemoryMiB),
		"-smp", strconv.Itoa(max(c.CPUs, 1)),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", c.Kernel,
		"-initrd", c.Initrd,
		"-append", fmt.Sprintf("console=ttyS0 "+kernelVerbosity+" panic=-1 ipv6.disable=1 psi=0 %scove.hostname=%s cove.id=%s%s", tscArgs(c.Accel), c.Hostname, c.ID, c.limitArgs()),
		"-chardev", "file,id=con,path=" + c.Dir.consoleLog(),
		"-serial", "chardev:con",
		"-netdev", c.netdev(),
		"-device", fmt.Sprintf("virtio-net-device,netdev=net0,mac=%s,host_mtu=%d", netns.GuestMAC, netns.MTU),
		// The agent's channel: a virtio-serial port, so the daemon reaches
		// the agent without the guest's network stack (which stays the
		// sandbox's own) and every clone answers on its own socket.
		"-chardev", "socket,id=agent,path=" + c.Dir.agentSock() + ",server=on,wait=off",
		"-device", "virtio-serial-device,max_ports=2",
		"-device", "virtserialport,chardev=agent,name=" + agentproto.SerialPort,
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", "virtio-rng-device,rng=rng0",
		"-object", c.memBackend(),
	}
	a = append(a, c.disk()...)
	a = append(a, "-qmp", "unix:"+c.Dir.qmpSock()+",server=on,wait=off")
	if c.Sandbox {
		a = append(a, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
	}
	if c.Incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// limitArgs are the kernel command line's words for the agent's bounds.
func (c vmConfig) limitArgs() string {
	var s string
	if c.Pids > 0 {
		s += " cove.pids=" + strconv.Itoa(c.Pids)
	}
	if c.OpenFiles > 0 {
		s += " cove.nofile=" + strconv.Itoa(c.OpenFiles)
	}
	return s
}

// Every disk node's cache options, on the command line (diskOpts) and for
// a branch's new overlay (diskCache):
//   - no-flush: a sandbox's disk dies with it, so a guest's fsync need not
//     reach the platter; a checkpoint syncs what it keeps.
//   - file.drop-cache=off: a migration inactivates the disk and cont
//     activates it again, which by default drops each file's page cache
//     (POSIX_FADV_DONTNEED), meant for a destination on another host. Here
//     the files never move, and the drop ran with the source stopped:
//     ~7 ms per 200 MiB written, the image's base (shared by every VM)
//     evicted each time, and each layer's metadata read back from disk.
const diskOpts = "cache.direct=off,cache.no-flush=on,file.drop-cache=off"

func diskCache() (cache, file map[string]any) {
	return map[string]any{"direct": false, "no-flush": true}, map[string]any{"drop-cache": false}
}

// disk is the root disk: every layer of the chain a node of its own, named
// for its layer (nodeName), each backed by the one before it and all but
// the active one read-only, so a branch and a flatten can name any.
func (c vmConfig) disk() []string {
	a := []string{"-blockdev", fmt.Sprintf("driver=raw,node-name=%s,read-only=on,%s,file.driver=file,file.filename=%s", baseNode, diskOpts, c.Base)}
	below := baseNode
	for i, l := range c.Layers {
		node := nodeName(layerIndex(filepath.Base(l)))
		a = append(a, "-blockdev", fmt.Sprintf("driver=qcow2,node-name=%s,backing=%s,read-only=%s,%s,file.driver=file,file.filename=%s",
			node, below, onOff(i < len(c.Layers)-1), diskOpts, l))
		below = node
	}
	return append(a, "-device", "virtio-blk-device,drive="+below)
}

// baseNode is the block node of the image's raw disk.
const baseNode = "base"

func (c vmConfig) memBackend() string {
	if c.MemPath == "" {
		return fmt.Sprintf("memory-backend-ram,id=mem,size=%dM", c.MemoryMiB)
	}
	s := fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=%s", c.MemoryMiB, c.MemPath, onOff(c.MemShared))
	if c.MemReadonly && !c.MemShared {
		s += ",readonly=on,rom=off"
	}
	return s
}

func (c vmConfig) netdev() string {
	if c.TapFD > 0 {
		return "tap,id=net0,fd=" + strconv.Itoa(c.TapFD)
	}
	return "tap,id=net0,ifname=" + tapName + ",script=no,downscript=no"
}

// tscArgs tells a TCG guest its TSC's rate. Under TCG the guest's TSC is
// the host's, and microvm offers no HPET or PM timer to calibrate it
// against: on a busy host the PIT calibration fails and the guest hangs
// early in boot. KVM guests calibrate through kvmclock.
func tscArgs(accel string) string {
	if accel == "kvm" || hostTSCkHz == 0 {
		return ""
	}
	return fmt.Sprintf("tsc_early_khz=%d tsc=reliable ", hostTSCkHz)
}

// hostTSCkHz is the host's TSC rate as the kernel reports it in
// /proc/cpuinfo ("cpu MHz"), or 0 if unknown.
var hostTSCkHz = func() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil && mhz > 0 {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}()
