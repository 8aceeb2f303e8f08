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
	if want := []string{"check", "uid", "dir", "netns", "disk", "memory", "qemu", "qmp"}; !slices.Equal(cold, want) {
		t.Errorf("cold boot: %v, want %v", cold, want)
	}
	if want := []string{"check", "uid", "snapshot", "dir", "netns", "disk", "memory", "qemu", "qmp", "incoming"}; !slices.Equal(snap, want) {
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
// directory is made: either way nothing is left, and with one uid per VM
// the VM's uid is free again.
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
		{"with a uid, before the directory", []step{{"uid", (*launch).takeUID}, fail, {"dir", (*launch).makeDir}}},
		{"with a uid, after the directory", []step{{"uid", (*launch).takeUID}, {"dir", (*launch).makeDir}, fail}},
	} {
		dir := t.TempDir()
		r := &Runtime{cfg: Config{Dir: dir}, uid: -1, gid: -1, log: discardLogger()}
		if strings.HasPrefix(tc.name, "with a uid") {
			r.uids = newUIDPool(UIDRange{Base: 300000, Count: 1})
		}
		if err := r.newLaunch(runtime.Spec{ID: "vm1"}, "").run(context.Background(), tc.steps); !errors.Is(err, boom) {
			t.Errorf("%s: run = %v, want the step's error", tc.name, err)
		}
		if ids, _ := r.List(context.Background()); len(ids) != 0 {
			t.Errorf("%s: left %v", tc.name, ids)
		}
		if r.uids != nil {
			if _, ok := r.uids.lookup("vm1"); ok {
				t.Errorf("%s: the failed VM keeps its uid", tc.name)
			}
			if _, err := r.uids.get("vm2"); err != nil {
				t.Errorf("%s: the next VM gets no uid: %v", tc.name, err)
			}
		}
	}
}
