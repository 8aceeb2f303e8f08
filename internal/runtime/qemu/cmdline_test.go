package qemu

import (
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	c := vmConfig{Dir: vmDir{path: "/s/vm1"}, Kernel: "/i/vmlinux", Initrd: "/i/initrd", Base: "/i/rootfs.ext4",
		Layers:  []string{"/s/vm1/disk-0.qcow2", "/s/vm1/disk-3.qcow2"},
		MemPath: "/snap/mem", MemShared: false, MemReadonly: true, MemoryMiB: 256, CPUs: 2, Accel: "tcg", Hostname: "h", ID: "vm1",
		Pids: 1024, OpenFiles: 4096, Incoming: true, Sandbox: true}
	a := strings.Join(c.args(), " ")
	for _, want := range []string{
		"-M microvm,isa-serial=on,rtc=on,pic=off,memory-backend=mem",
		"-accel tcg,tb-size=256 -cpu max -m 256 -smp 2",
		"cove.hostname=h cove.id=vm1 cove.pids=1024 cove.nofile=4096",
		"memory-backend-file,id=mem,size=256M,mem-path=/snap/mem,share=off,readonly=on,rom=off",
		"-netdev tap,id=net0,ifname=tap0,script=no,downscript=no",
		"virtio-net-device,netdev=net0,mac=02:c0:7e:00:00:02",
		"-blockdev driver=raw,node-name=base,read-only=on,cache.direct=off,cache.no-flush=on,file.drop-cache=off,file.driver=file,file.filename=/i/rootfs.ext4",
		"-blockdev driver=qcow2,node-name=root,backing=base,read-only=on,cache.direct=off,cache.no-flush=on,file.drop-cache=off,file.driver=file,file.filename=/s/vm1/disk-0.qcow2",
		"-blockdev driver=qcow2,node-name=root3,backing=root,read-only=off,cache.direct=off,cache.no-flush=on,file.drop-cache=off,file.driver=file,file.filename=/s/vm1/disk-3.qcow2",
		"-device virtio-blk-device,drive=root3",
		"-qmp unix:/s/vm1/qmp.sock,server=on,wait=off",
		"-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-incoming defer",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("command line lacks %q:\n%s", want, a)
		}
	}
	c.Accel, c.Incoming, c.Sandbox, c.MemShared = "kvm", false, false, true
	a = strings.Join(c.args(), " ")
	if !strings.Contains(a, "-accel kvm -cpu host,-arch-capabilities") || strings.Contains(a, "-incoming") ||
		strings.Contains(a, "-sandbox") || !strings.Contains(a, "share=on") || strings.Contains(a, "readonly") {
		t.Errorf("kvm, shared, no incoming, no sandbox:\n%s", a)
	}
	c.MemShared, c.MemReadonly = false, false
	if a = strings.Join(c.args(), " "); strings.Contains(a, "readonly") || !strings.Contains(a, "share=off") {
		t.Errorf("private, writable RAM file:\n%s", a)
	}
}
