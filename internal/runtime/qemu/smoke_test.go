package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// TestSmokeBootBrokenInitrd: artifacts whose guest cannot reach its agent
// (an initrd of garbage: the kernel panics, and -no-reboot ends QEMU) fail
// the smoke boot at once, with the console's words, rather than after
// SmokeTimeout, and leave no VM behind. (The build's own smoke boot of good
// artifacts runs in every `make image-vm`.)
func TestSmokeBootBrokenInitrd(t *testing.T) {
	_, files := vmRuntime(t)
	dir := t.TempDir()
	// An unprivileged QEMU reads it: t.TempDir's parent is 0700.
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o755)
	broken := filepath.Join(dir, "initrd.cpio.gz")
	if err := os.WriteFile(broken, []byte(strings.Repeat("not an initramfs ", 4096)), 0o444); err != nil {
		t.Fatal(err)
	}
	bad := runtime.ImageFiles{Rootfs: files.Rootfs, Kernel: files.Kernel, Initrd: broken, Disk: files.Disk}
	t0 := time.Now()
	err := SmokeBoot(context.Background(), Config{Accel: os.Getenv("COVE_QEMU_ACCEL"), User: os.Getenv("COVE_QEMU_USER")}, bad)
	took := time.Since(t0)
	if err == nil {
		t.Fatal("a guest with a garbage initrd passed the smoke boot")
	}
	t.Logf("took %s: %v", took, err)
	if !errors.Is(err, runtime.ErrExited) || !strings.Contains(err.Error(), "smoke boot") {
		t.Errorf("error %v: want the guest's exit, named as the smoke boot's", err)
	}
	if took > SmokeTimeout/2 {
		t.Errorf("took %s: the failure should be seen when the guest dies", took)
	}
	if left, _ := filepath.Glob("/tmp/cove-smoke-*/vms/smoke-*"); len(left) > 0 {
		t.Errorf("smoke VMs left behind: %v", left)
	}
}
