package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// TestStepLists checks that a restore makes what a cold boot does, in the
// same order, around its own steps.
func TestStepLists(t *testing.T) {
	names := func(steps []step) []string {
		var n []string
		for _, s := range steps {
			n = append(n, s.name)
		}
		return n
	}
	cold, snap := names(coldBoot), names(fromSnapshot)
	if want := []string{"check", "dir", "netns", "disk", "memory", "qemu", "qmp"}; !slices.Equal(cold, want) {
		t.Errorf("cold boot: %v, want %v", cold, want)
	}
	if want := []string{"check", "snapshot", "dir", "netns", "disk", "memory", "qemu", "qmp", "incoming"}; !slices.Equal(snap, want) {
		t.Errorf("restore: %v, want %v", snap, want)
	}
}

func TestLaunchCheck(t *testing.T) {
	img := t.TempDir()
	files := runtime.ImageFiles{Rootfs: filepath.Join(img, "rootfs"),
		Kernel: filepath.Join(img, "vmlinux"), Initrd: filepath.Join(img, "initrd"), Disk: filepath.Join(img, "disk")}
	for _, f := range []string{files.Kernel, files.Initrd, files.Disk} {
		os.WriteFile(f, nil, 0o644)
	}
	noDisk := files
	noDisk.Disk = filepath.Join(img, "none")
	for _, tc := range []struct {
		name    string
		dir, id string
		files   runtime.ImageFiles
		wantErr string
	}{
		{"ok", "/s", "vm1", files, ""},
		{"bad id", "/s", "../x", files, "invalid sandbox id"},
		{"no VM artifacts", "/s", "vm1", noDisk, "no VM artifacts"},
		{"sockets too long", "/" + strings.Repeat("s", 100), "vm1", files, "too long for a unix socket"},
		// qmp.sock fits, agent.sock (two letters longer) does not.
		{"agent socket too long", "/" + strings.Repeat("s", 92), "vm1", files, "too long for a unix socket"},
	} {
		r := &Runtime{cfg: Config{Dir: tc.dir}}
		err := r.newLaunch(runtime.Spec{ID: tc.id, ImageFiles: tc.files}, "").check(context.Background())
		if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: check = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestLaunchCleanup fails launches at a step before and after the VM's
// directory is made: either way nothing is left.
func TestLaunchCleanup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Destroy runs ip netns") // as in TestListAndDestroyIdempotent
	}
	boom := errors.New("boom")
	fail := step{"fail", func(*launch, context.Context) error { return boom }}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"before the directory", []step{fail, {"dir", (*launch).makeDir}}},
		{"after the directory", []step{{"dir", (*launch).makeDir}, fail}},
	} {
		dir := t.TempDir()
		r := &Runtime{cfg: Config{Dir: dir}, uid: -1, gid: -1, log: discardLogger()}
		if err := r.newLaunch(runtime.Spec{ID: "vm1"}, "").run(context.Background(), tc.steps); !errors.Is(err, boom) {
			t.Errorf("%s: run = %v, want the step's error", tc.name, err)
		}
		if ids, _ := r.List(context.Background()); len(ids) != 0 {
			t.Errorf("%s: left %v", tc.name, ids)
		}
	}
}
