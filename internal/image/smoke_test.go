package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// TestBuildVMSmokeBoot: VM artifacts are smoke-booted before they are
// published. A failing boot is an ErrSmokeBoot naming the image, and keeps
// the name's current image (with its VM artifacts) current, publishing
// nothing; the next build, booting, publishes and moves the name.
func TestBuildVMSmokeBoot(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "mkfs.ext4", "resize2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			missingTool(t, tool)
		}
	}
	if _, err := findBusybox(); err != nil {
		missingTool(t, err.Error())
	}
	e := newEnv(t)
	deb := fakeKernelDeb(t)
	var boots atomic.Int32
	var fail atomic.Bool
	smoke := func(ctx context.Context, vf VMFiles) error {
		boots.Add(1)
		// What it boots is complete and not yet published.
		if !vf.Exists() || strings.HasSuffix(vf.Dir, "/vm") {
			return fmt.Errorf("smoke boot given %+v", vf)
		}
		if fail.Load() {
			return errors.New("the agent did not answer")
		}
		return nil
	}
	build := func() (Image, error) {
		var prog bytes.Buffer
		img, err := Build(t.Context(), BuildOptions{Dir: e.dir, AgentPath: e.agent, Progress: &prog, buildBase: e.base.build,
			VM: true, VMKernelDeb: deb, VMSmoke: smoke})
		t.Logf("progress:\n%s", prog.String())
		return img, err
	}
	current := func() string {
		t.Helper()
		return strings.TrimSpace(mustRead(t, filepath.Join(e.dir, "default.current")))
	}

	first, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if boots.Load() != 1 || !VMFilesFor(first.Rootfs).Exists() || current() != first.ID {
		t.Fatalf("first build: %d boots, VM files %v, current %s", boots.Load(), VMFilesFor(first.Rootfs).Exists(), current())
	}

	// A new agent, and a smoke boot that fails.
	e.setAgent(t, "agent v2")
	fail.Store(true)
	_, err = build()
	if !errors.Is(err, ErrSmokeBoot) || !strings.Contains(err.Error(), "the agent did not answer") {
		t.Fatalf("build with a failing smoke boot: %v, want ErrSmokeBoot with the cause", err)
	}
	if current() != first.ID || !VMFilesFor(first.Rootfs).Exists() {
		t.Fatalf("after a failed smoke boot the current image is %s, want %s still", current(), first.ID)
	}
	img, rerr := Resolve(e.dir, "")
	if rerr != nil || img.ID != first.ID {
		t.Fatalf("Resolve after a failed smoke boot: %+v %v", img, rerr)
	}
	ents, _ := filepath.Glob(filepath.Join(e.dir, "default-*", "vm"))
	if len(ents) != 1 {
		t.Errorf("VM artifacts published: %v, want the first image's alone", ents)
	}
	if left := tmpEntries(t, e.dir); len(left) > 0 {
		t.Errorf("leftovers: %v", left)
	}

	// Fixed: the same build now boots, publishes and moves the name.
	fail.Store(false)
	second, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID || current() != second.ID || !VMFilesFor(second.Rootfs).Exists() || boots.Load() != 3 {
		t.Fatalf("after the fix: %s current %s, VM files %v, %d boots", second.ID, current(), VMFilesFor(second.Rootfs).Exists(), boots.Load())
	}
	// Published artifacts are not booted again.
	if _, err := build(); err != nil || boots.Load() != 3 {
		t.Fatalf("an up-to-date build: %v, %d boots, want 3", err, boots.Load())
	}
}

func missingTool(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing prerequisite: %s", what)
	}
	t.Skipf("missing %s", what)
}

// fakeKernelDeb builds a kernel .deb the VM build accepts: a bzImage whose
// LZ4 payload is an x86-64 ELF (this test binary) and the modules /init
// loads.
func fakeKernelDeb(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	elfData, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !completeELF(elfData) {
		t.Skip("test binary is not an x86-64 ELF")
	}
	var z bytes.Buffer
	w := lz4.NewWriter(&z)
	if err := w.Apply(lz4.LegacyOption(true)); err != nil {
		t.Fatal(err)
	}
	w.Write(elfData)
	w.Close()
	bz := append([]byte("setup"), z.Bytes()...)
	bz = append(bz, []byte("\x00\x10\x00\x00trailer")...)

	root := filepath.Join(t.TempDir(), "pkg")
	put := func(p string, b []byte) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(filepath.Join(root, "DEBIAN", "control"), []byte("Package: linux-image-test\nVersion: 1\nArchitecture: amd64\nMaintainer: test <t@example.invalid>\nDescription: test kernel\n"))
	put(filepath.Join(root, "boot", "vmlinuz-6.1.0-test"), bz)
	for _, m := range GuestModules {
		put(filepath.Join(root, "lib", "modules", "6.1.0-test", "kernel", m, m+".ko"), []byte("module "+m))
	}
	deb := filepath.Join(t.TempDir(), "linux-image-test.deb")
	if out, err := exec.Command("dpkg-deb", "--build", "--root-owner-group", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v: %s", err, out)
	}
	return deb
}
