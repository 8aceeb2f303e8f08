package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// ProbeKVM boots a throwaway guest under KVM and reports whether it got as
// far as running its first user-space program. /dev/kvm existing proves
// nothing: on hosts that are themselves VMs it may be a software
// hypervisor on which guests crawl and die.
//
// The verdict is cached in probeCacheDir for this boot of the host, per
// QEMU binary and kernel, so daemon restarts do not pay for the probe.
func ProbeKVM(ctx context.Context, qemu string, vf runtime.ImageFiles) error {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return errors.New("no /dev/kvm on this host")
	}
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	path, err := exec.LookPath(qemu)
	if err != nil {
		return fmt.Errorf("%s not installed", qemu)
	}
	if !vmFilesExist(vf) {
		return errors.New("the default image has no VM artifacts (cove image build --vm)")
	}
	key := cacheKey(path, vf.Kernel)
	cache := filepath.Join(probeCacheDir, "kvm-probe-"+key)
	if b, err := os.ReadFile(cache); err == nil {
		if v := strings.TrimSpace(string(b)); v == "ok" {
			return nil
		} else {
			return errors.New(v + " (cached: " + cache + ")")
		}
	}
	err = probeKVM(ctx, path, vf)
	verdict := "ok"
	if err != nil {
		verdict = err.Error()
	}
	if os.MkdirAll(probeCacheDir, 0o755) == nil {
		os.WriteFile(cache, []byte(verdict+"\n"), 0o644)
	}
	return err
}

// vmFilesExist reports whether an image's VM artifacts are all there.
func vmFilesExist(f runtime.ImageFiles) bool {
	for _, p := range []string{f.Kernel, f.Initrd, f.Disk} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// probeCacheDir holds KVM probe verdicts; /run empties at boot.
const probeCacheDir = "/run/cove"

func cacheKey(files ...string) string {
	h := sha256.New()
	for _, f := range files {
		fi, err := os.Stat(f)
		if err == nil {
			fmt.Fprintf(h, "%s %d %d\n", f, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func probeKVM(ctx context.Context, qemu string, vf runtime.ImageFiles) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// busybox run as init prints its usage and exits; the kernel then
	// panics with "Attempted to kill init": user space ran.
	cmd := exec.CommandContext(ctx, qemu,
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on", "-accel", "kvm", "-cpu", "host,-arch-capabilities",
		"-m", "256", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", vf.Kernel, "-initrd", vf.Initrd,
		"-append", "console=ttyS0 panic=-1 rdinit=/bin/busybox", "-serial", "stdio")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if bytes.Contains(out.Bytes(), []byte("Attempted to kill init")) {
		return nil
	}
	tail := out.Bytes()
	if len(tail) > 200 {
		tail = tail[len(tail)-200:]
	}
	if ctx.Err() != nil {
		return fmt.Errorf("a KVM guest did not boot within 10s (%q)", bytes.TrimSpace(tail))
	}
	return fmt.Errorf("a KVM guest did not boot: %v (%q)", err, bytes.TrimSpace(tail))
}
