package image

// VM artifacts: what the QEMU microVM backend boots from an image.
//
//	<image>/vm/vmlinux           uncompressed PVH ELF of Debian's cloud kernel
//	<image>/vm/initrd.cpio.gz    static busybox + virtio modules + /init
//	<image>/vm/rootfs.ext4       the image's rootfs as an ext4 disk (never written)
//	base/vm-<key>/               kernel + initrd cache, key = sha256(kernel
//	                             package and version, busybox, init, modules)
//
// The kernel and initrd do not depend on the agent, so every image shares
// one cached pair (hard links); the ext4 disk is made from the image's own
// rootfs. Like the rootfs, the artifacts are immutable once published.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/dustin/go-humanize"
	"github.com/pierrec/lz4/v4"
)

// VMFiles names the VM artifacts of an image.
type VMFiles struct {
	Dir    string `json:"dir"`
	Kernel string `json:"kernel"`
	Initrd string `json:"initrd"`
	Disk   string `json:"disk"`
}

// VMFilesFor returns where the VM artifacts of the image whose rootfs is
// rootfs live (they need not exist).
func VMFilesFor(rootfs string) VMFiles {
	d := filepath.Join(filepath.Dir(rootfs), "vm")
	return VMFiles{Dir: d, Kernel: filepath.Join(d, "vmlinux"), Initrd: filepath.Join(d, "initrd.cpio.gz"), Disk: filepath.Join(d, "rootfs.ext4")}
}

// Exists reports whether all three artifacts are there.
func (v VMFiles) Exists() bool {
	for _, p := range []string{v.Kernel, v.Initrd, v.Disk} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// GuestModules are the kernel modules /init loads, in order. ext4, jbd2,
// mbcache and crc16 are built into Debian's cloud kernel; should a kernel
// have them as modules, they are loaded too (see vmModuleOrder).
var GuestModules = []string{
	"virtio_ring", "virtio", "virtio_mmio", "virtio_blk",
	"failover", "net_failover", "virtio_net", "virtio-rng", "virtio_console",
}

// optionalModules are loaded when the kernel has them as modules.
var optionalModules = []string{"crc16", "mbcache", "jbd2", "crc32c_generic", "libcrc32c", "ext4", "overlay"}

// vmInitVersion changes whenever the initramfs does (its /init, its
// layout) or the way the root disk is made.
const vmInitVersion = "cove-vm-init-6"

// initScript is the initramfs's /init: load the modules, bring up the
// network, mount the ext4 root and hand PID 1 to cove-agent.
func initScript(modules []string) string {
	return `#!/bin/busybox sh
# cove microVM init: modules, network, root, then cove-agent as PID 1.
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in ` + strings.Join(modules, " ") + `; do
	insmod /lib/modules/$m.ko 2>/dev/null || echo "cove-init: insmod $m failed"
done
HN=cove; ID=
for a in $(cat /proc/cmdline); do
	case "$a" in
	cove.hostname=*) HN="${a#*=}" ;;
	cove.id=*) ID="${a#*=}" ;;
	esac
done
hostname "$HN"
ip link set lo up
ip addr add ` + netns.GuestAddr + ` dev eth0
ip link set eth0 up
ip route add default via ` + netns.HostIP + `
i=0
while [ ! -b /dev/vda ] && [ $i -lt 1000 ]; do usleep 5000; i=$((i+1)); done
# no_prefetch_block_bitmaps: else a kernel thread reads every group's block
# bitmap in the background after mount, and every clone of a snapshot taken
# meanwhile carries on with it (ext4 and block code to translate under TCG).
# noinit_itable, for the same reason: the groups the agent adds when it
# grows the root to its disk get their inode tables zeroed as they are
# added, not by a thread in the background.
if ! mount -t ext4 -o noatime,no_prefetch_block_bitmaps,noinit_itable /dev/vda /newroot; then
	echo "cove-init: cannot mount the root disk"; exec sh
fi
umount /proc /sys
umount /dev 2>/dev/null
mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs -o mode=755 devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /newroot/dev/pts
mount -t tmpfs -o nosuid,nodev,mode=1777,size=65536k shm /newroot/dev/shm
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=linux \
	COVE_SANDBOX_ID="$ID" switch_root /newroot /usr/local/bin/cove-agent --serial ` + agentproto.SerialPort + `
`
}

// cpioEntry is one file of the initramfs.
type cpioEntry struct {
	Name string // without leading slash
	Mode uint32 // including type bits
	Data []byte // file content or symlink target
}

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
)

// initrdEntries lays out the initramfs: busybox, /init and the modules
// (named <module>.ko, flat), from modDir (a kernel's lib/modules/<ver>).
// It returns the modules /init loads, in order.
func initrdEntries(busybox []byte, modDir string) ([]cpioEntry, []string, error) {
	found := map[string]string{}
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			found[strings.TrimSuffix(d.Name(), ".ko")] = p
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var order []string
	for _, m := range optionalModules[:6] { // ext4 and its dependencies first
		if _, ok := found[m]; ok {
			order = append(order, m)
		}
	}
	for _, m := range GuestModules {
		if _, ok := found[m]; !ok {
			return nil, nil, fmt.Errorf("kernel module %s not found in %s", m, modDir)
		}
		order = append(order, m)
	}
	if _, ok := found["overlay"]; ok {
		order = append(order, "overlay")
	}
	ents := []cpioEntry{
		{Name: "bin", Mode: cpioDir | 0o755},
		{Name: "bin/busybox", Mode: cpioFile | 0o755, Data: busybox},
		{Name: "dev", Mode: cpioDir | 0o755},
		{Name: "init", Mode: cpioFile | 0o755, Data: []byte(initScript(order))},
		{Name: "lib", Mode: cpioDir | 0o755},
		{Name: "lib/modules", Mode: cpioDir | 0o755},
		{Name: "newroot", Mode: cpioDir | 0o755},
		{Name: "proc", Mode: cpioDir | 0o755},
		{Name: "sys", Mode: cpioDir | 0o755},
	}
	for _, m := range order {
		data, err := os.ReadFile(found[m])
		if err != nil {
			return nil, nil, err
		}
		ents = append(ents, cpioEntry{Name: "lib/modules/" + m + ".ko", Mode: cpioFile | 0o644, Data: data})
	}
	return ents, order, nil
}

// writeCPIO writes ents as a gzipped newc archive.
func writeCPIO(w io.Writer, ents []cpioEntry) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	ino := 1
	hdr := func(name string, mode uint32, size int) {
		fmt.Fprintf(zw, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\x00",
			ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0, name)
		ino++
		pad(zw, 110+len(name)+1)
	}
	for _, e := range ents {
		hdr(e.Name, e.Mode, len(e.Data))
		zw.Write(e.Data)
		pad(zw, len(e.Data))
	}
	hdr("TRAILER!!!", 0, 0)
	return zw.Close()
}

// padInitrd pads an initramfs with zeros (which the kernel skips) to 4
// bytes past a page boundary. QEMU 10's microvm loads the initrd at the
// top of RAM, page-aligned, over the ACPI tables it put in the last
// kilobyte there: the guest then finds no virtio devices. This way the
// initrd ends almost a page below the top.
func padInitrd(b *bytes.Buffer) {
	const page = 4096
	n := b.Len()
	b.Write(make([]byte, (n/page+1)*page+4-n))
}

func pad(w io.Writer, n int) {
	if r := n % 4; r != 0 {
		w.Write(make([]byte, 4-r))
	}
}

// extractVmlinux returns the uncompressed ELF inside a bzImage whose
// payload is LZ4 (legacy frame, magic 02 21 4c 18), as Debian's kernels
// are. QEMU boots the ELF through its PVH entry point.
func extractVmlinux(bz []byte) ([]byte, error) {
	magic := []byte{0x02, 0x21, 0x4c, 0x18}
	for off := 0; ; {
		i := bytes.Index(bz[off:], magic)
		if i < 0 {
			return nil, errors.New("no LZ4 payload with a valid ELF in the kernel image")
		}
		off += i
		var out bytes.Buffer
		// The payload is followed by the decompressed size and the rest of
		// the bzImage, which the reader trips over: judge by the ELF.
		io.Copy(&out, lz4.NewReader(bytes.NewReader(bz[off:])))
		if b := out.Bytes(); completeELF(b) {
			return b, nil
		}
		off++
	}
}

// completeELF reports whether b is an x86-64 ELF holding all its segments.
func completeELF(b []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil || f.Machine != elf.EM_X86_64 {
		return false
	}
	for _, p := range f.Progs {
		if p.Off+p.Filesz > uint64(len(b)) {
			return false
		}
	}
	return len(f.Progs) > 0
}

// kernelPackage is the Debian cloud kernel a VM image boots.
type kernelPackage struct{ Name, Version, SHA256 string }

// pinnedKernel is the guest kernel every VM image is built with: a package
// at one version, its .deb's SHA-256 checked after the download, so that a
// kernel update in the archive cannot change (and break) sandboxes
// silently. The QEMU backend's quirks are specific to a kernel (see the
// boot quirks in docs/ARCHITECTURE.md): move the pin on purpose, the three
// fields together, from `apt-cache show <name>` (Version, SHA256), and
// check it with `make image-vm` (which smoke-boots it) and `make e2e-qemu`.
// A pin the archive no longer has fails the build with a clear error; a
// build with --vm-kernel-deb uses that file instead.
func pinnedKernel() kernelPackage {
	return kernelPackage{
		Name:    "linux-image-6.1.0-57-cloud-amd64-unsigned",
		Version: "6.1.192-3",
		SHA256:  "e31a28be852fe1faec3cdbb0d19a25818f3b951d15dc13e331aeca4f991c52fe",
	}
}

// ErrKernelDigest is a downloaded kernel package whose SHA-256 is not its
// pin's.
var ErrKernelDigest = errors.New("kernel package digest mismatch")

// checkKernelDeb checks that the .deb at path is the pinned package kp.
func checkKernelDeb(path string, kp kernelPackage) error {
	got, err := sha256File(path)
	if err != nil {
		return err
	}
	if !strings.EqualFold(got, kp.SHA256) {
		return fmt.Errorf("%s %s: %w: sha256 %s, pinned %s", kp.Name, kp.Version, ErrKernelDigest, got, kp.SHA256)
	}
	return nil
}

// sha256File is the hex SHA-256 of a file's content.
func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// findBusybox returns a statically linked busybox (Debian's
// busybox-static installs it as /bin/busybox).
func findBusybox() ([]byte, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			continue
		}
		static := true
		for _, pr := range f.Progs {
			if pr.Type == elf.PT_INTERP {
				static = false
			}
		}
		if static {
			return b, nil
		}
		return nil, fmt.Errorf("%s is dynamically linked: install busybox-static", p)
	}
	return nil, errors.New("no busybox: install busybox-static (scripts/install-deps.sh with INSTALL_QEMU=1)")
}

// ensureVM makes img's VM artifacts unless they exist. The caller holds
// the build lock.
func (b *builder) ensureVM(ctx context.Context, img Image) error {
	vf := VMFilesFor(img.Rootfs)
	if vf.Exists() {
		b.prog.printf("vm: %s has its VM artifacts", img.ID)
		return nil
	}
	start := time.Now()
	kdir, err := b.ensureVMKernel(ctx)
	if err != nil {
		return fmt.Errorf("vm kernel: %w", err)
	}
	tmp, err := os.MkdirTemp(img.Dir, tmpPrefix+"vm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"vmlinux", "initrd.cpio.gz"} {
		if err := fsutil.LinkOrCopy(ctx, filepath.Join(kdir, f), filepath.Join(tmp, f)); err != nil {
			return err
		}
	}
	size, err := treeSize(img.Rootfs)
	if err != nil {
		return err
	}
	// Room for ext4's own metadata; what it does not need goes again below.
	mib := (size*11/10)>>20 + 256
	disk := filepath.Join(tmp, "rootfs.ext4")
	out := &outputSink{log: io.Discard}
	err = b.prog.step(fmt.Sprintf("vm: ext4 root disk (%d MiB)", mib), nil, func() error {
		return run(ctx, out, "", "mkfs.ext4", "-q", "-F", "-L", "root", "-d", img.Rootfs, "-m", "0",
			"-E", "lazy_itable_init=0,lazy_journal_init=0",
			disk, strconv.FormatInt(mib, 10)+"M")
	})
	if err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, out.lastLines())
	}
	// Shrunk to (about) its files, with no blocks reserved for root: a
	// VM's disk is this plus the sandbox's disk size, which its agent
	// grows the filesystem into, so that size is what the sandbox can
	// write.
	err = b.prog.step("vm: shrink the root disk to its files", nil, func() error {
		return run(ctx, out, "", "resize2fs", "-M", disk)
	})
	if err != nil {
		return fmt.Errorf("resize2fs: %w: %s", err, out.lastLines())
	}
	for _, f := range []string{"vmlinux", "initrd.cpio.gz", "rootfs.ext4"} {
		os.Chmod(filepath.Join(tmp, f), 0o444)
	}
	if err := b.smokeBoot(ctx, img, tmp); err != nil {
		return err
	}
	if err := publish(tmp, vf.Dir); err != nil {
		return err
	}
	b.prog.printf("vm: artifacts of %s ready in %.1fs", img.ID, time.Since(start).Seconds())
	return nil
}

// ErrSmokeBoot is VM artifacts that did not boot to an answering agent.
var ErrSmokeBoot = errors.New("smoke boot failed")

// smokeBoot boots img's VM artifacts in tmp, not yet published, with
// opts.VMSmoke; nothing to do without one.
func (b *builder) smokeBoot(ctx context.Context, img Image, tmp string) error {
	if b.opts.VMSmoke == nil {
		return nil
	}
	// An unprivileged QEMU reads them: MkdirTemp made tmp 0700.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	vf := VMFiles{Dir: tmp, Kernel: filepath.Join(tmp, "vmlinux"), Initrd: filepath.Join(tmp, "initrd.cpio.gz"), Disk: filepath.Join(tmp, "rootfs.ext4")}
	start := time.Now()
	err := b.prog.step("vm: smoke boot (the agent must answer)", nil, func() error { return b.opts.VMSmoke(ctx, vf) })
	if err != nil {
		return fmt.Errorf("vm: %s: %w: %w (nothing published; the current image stays as it was)", img.ID, ErrSmokeBoot, err)
	}
	b.prog.printf("vm: smoke boot of %s: the agent answered in %.1fs", img.ID, time.Since(start).Seconds())
	return nil
}

// ensureVMKernel returns the cache directory holding vmlinux and
// initrd.cpio.gz, building them if needed.
func (b *builder) ensureVMKernel(ctx context.Context) (string, error) {
	busybox, err := findBusybox()
	if err != nil {
		return "", err
	}
	kp := pinnedKernel()
	if b.opts.VMKernelDeb != "" {
		kp = kernelPackage{Name: "file:" + filepath.Base(b.opts.VMKernelDeb), Version: fileDigest(b.opts.VMKernelDeb)}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", vmInitVersion, kp.Name, kp.Version, initScript(GuestModules))
	h.Write(busybox)
	key := hex.EncodeToString(h.Sum(nil))
	final := filepath.Join(b.opts.Dir, "base", "vm-"+key[:16])
	if _, err := os.Stat(filepath.Join(final, "initrd.cpio.gz")); err == nil {
		b.prog.printf("vm: kernel %s %s cached", kp.Name, kp.Version)
		return final, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(b.opts.Dir, "base"), tmpPrefix+"vm-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	deb := b.opts.VMKernelDeb
	out := &outputSink{log: io.Discard}
	if deb == "" {
		err := b.prog.step("vm: apt-get download "+kp.Name+"="+kp.Version+" (pinned)", nil, func() error {
			os.Chmod(tmp, 0o755) // apt's _apt user writes here when it can
			return run(ctx, out, "", "sh", "-c", `cd "$1" && apt-get download -q "$2"`, "sh", tmp, kp.Name+"="+kp.Version)
		})
		if err != nil {
			return "", fmt.Errorf("download the pinned kernel %s=%s (apt-get update? if the archive dropped that version, move the pin in internal/image/vm.go): %w: %s",
				kp.Name, kp.Version, err, out.lastLines())
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(debs) != 1 {
			return "", fmt.Errorf("download kernel: found %d .deb files", len(debs))
		}
		deb = debs[0]
		if err := checkKernelDeb(deb, kp); err != nil {
			return "", fmt.Errorf("download kernel: %w", err)
		}
		b.prog.printf("vm: kernel %s %s: sha256 %.12s matches its pin", kp.Name, kp.Version, kp.SHA256)
	}
	x := filepath.Join(tmp, "x")
	if err := run(ctx, out, "", "dpkg-deb", "-x", deb, x); err != nil {
		return "", fmt.Errorf("unpack %s: %w: %s", deb, err, out.lastLines())
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(x, "boot", "vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(x, "lib", "modules", "*"))
	if len(vmlinuz) != 1 || len(mods) != 1 {
		return "", fmt.Errorf("%s: want one vmlinuz and one module tree, found %d and %d", deb, len(vmlinuz), len(mods))
	}
	bz, err := os.ReadFile(vmlinuz[0])
	if err != nil {
		return "", err
	}
	vmlinux, err := extractVmlinux(bz)
	if err != nil {
		return "", fmt.Errorf("%s: %w", vmlinuz[0], err)
	}
	ents, _, err := initrdEntries(busybox, mods[0])
	if err != nil {
		return "", err
	}
	var cpio bytes.Buffer
	if err := writeCPIO(&cpio, ents); err != nil {
		return "", err
	}
	padInitrd(&cpio)
	work := filepath.Join(tmp, "out")
	if err := os.Mkdir(work, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "vmlinux"), vmlinux, 0o444); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "initrd.cpio.gz"), cpio.Bytes(), 0o444); err != nil {
		return "", err
	}
	os.WriteFile(filepath.Join(work, "kernel.txt"), []byte(kp.Name+" "+kp.Version+"\n"), 0o444)
	if err := publish(work, final); err != nil {
		return "", err
	}
	b.prog.printf("vm: kernel %s %s: vmlinux %s, initrd %s", kp.Name, kp.Version, humanize.IBytes(uint64(len(vmlinux))), humanize.IBytes(uint64(cpio.Len())))
	return final, nil
}

func fileDigest(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "missing"
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}
