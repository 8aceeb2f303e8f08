package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// smallFS is a tmpfs of a fixed size mounted over one of a daemon's state
// directories, and a file that fills it up.
type smallFS struct {
	dir, filler string
}

// mountSmall mounts a tmpfs of sizeMiB over dir (made if need be), which
// the test's Cleanup unmounts: register it before the daemon's stop, which
// runs first.
func mountSmall(t *testing.T, dir string, sizeMiB int) smallFS {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%dm,mode=0700", sizeMiB)); err != nil {
		t.Fatalf("mount a tmpfs over %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return smallFS{dir: dir, filler: filepath.Join(dir, ".e2e-filler")}
}

// fill takes all of the file system's space but a little (less than any
// checkpoint needs) with one file.
func (fs smallFS) fill(t *testing.T) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(fs.dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail)*st.Bsize - 256<<10
	f, err := os.OpenFile(fs.filler, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free); err != nil {
		t.Fatalf("fill %s: %v", fs.dir, err)
	}
}

// free removes the filler.
func (fs smallFS) free(t *testing.T) {
	t.Helper()
	if err := os.Remove(fs.filler); err != nil {
		t.Fatal(err)
	}
}

// TestDiskFull: with the daemon's snapshot and checkpoint storage full, a
// snapshot build, a branch, a checkpoint and a template build each fail
// with 507 and a message that says the disk is full and what to do; none
// leaves anything (not listed, no row, no directory or temp file, nothing
// on the host); the source sandbox runs on, its files and memory intact;
// and once space is freed the same call succeeds.
func TestDiskFull(t *testing.T) {
	dir := filepath.Join(suite.tmp, "diskfull")
	// A QEMU snapshot holds the VM's RAM and disk layers; a gVisor one is
	// some MiB.
	size := 512
	if backend() == "qemu" {
		size = 4096
	}
	snaps := mountSmall(t, filepath.Join(dir, "state", "snapshots"), size)
	ckpts := mountSmall(t, filepath.Join(dir, "state", "checkpoints"), size)
	d, err := startDaemon(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	lc := leakCheck{mounts: []string{snaps.dir, ckpts.dir}, files: []string{snaps.filler, ckpts.filler}}
	ctx := context.Background()
	src := create(t, d, apitype.CreateSandboxRequest{TTLSecs: 1800})[0]
	execOK(t, d, src, "echo kept > /work/note")
	evalOK(t, d, src, "x = 41")
	none := 0
	tmplDir := t.TempDir()
	writeFiles(t, tmplDir, map[string]string{"Dockerfile": "FROM cove:default\nRUN echo built > /made\n"})

	for _, tc := range []struct {
		name string
		fs   smallFS
		save func() error
		// gone checks that nothing of the failed save is listed.
		gone func() error
	}{
		{"snapshot build", snaps, func() error {
			_, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "full-build", PoolSize: &none})
			return err
		}, func() error { return notFound(d.c.GetSnapshot(ctx, "full-build")) }},
		{"branch", snaps, func() error {
			res, err := d.c.Branch(ctx, src.id, src.token, apitype.BranchRequest{Tag: "full-branch", N: 1})
			for _, kid := range res.Children {
				t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), kid.ID) })
			}
			return err
		}, func() error { return notFound(d.c.GetSnapshot(ctx, "full-branch")) }},
		{"checkpoint", ckpts, func() error {
			_, err := d.c.Checkpoint(ctx, src.id, src.token, "full-ckpt")
			return err
		}, func() error {
			cps, err := d.c.Checkpoints(ctx, src.id, src.token)
			if err == nil && len(cps) != 0 {
				err = fmt.Errorf("checkpoints %+v listed", cps)
			}
			return err
		}},
		{"template build", snaps, func() error {
			_, err := d.c.BuildTemplate(ctx, client.TemplateBuild{Name: "full-tmpl", Context: contextTar(t, tmplDir), PoolSize: &none}, nil)
			return err
		}, func() error { return notFound(d.c.GetTemplate(ctx, "full-tmpl")) }},
	} {
		before := dirNames(tc.fs.dir)
		tc.fs.fill(t)
		err := tc.save()
		if !errors.Is(err, client.ErrNoSpace) || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), "free space") {
			t.Fatalf("%s on a full disk: %v; want a 507 saying the disk is full and what to do\n%s", tc.name, err, d.logTail())
		}
		t.Logf("%s on a full disk: %v", tc.name, err)
		if err := tc.gone(); err != nil {
			t.Errorf("%s on a full disk: %v", tc.name, err)
		}
		if after := dirNames(tc.fs.dir); after != before {
			t.Errorf("%s on a full disk: %s holds %q, want %q as before", tc.name, tc.fs.dir, after, before)
		}
		waitNoLeaks(t, d, lc)
		if got := execOK(t, d, src, "cat /work/note"); got != "kept\n" {
			t.Fatalf("%s on a full disk: the source sandbox reads %q", tc.name, got)
		}
		if got := evalOK(t, d, src, "x"); got != "41" {
			t.Fatalf("%s on a full disk: the source's x = %s, want 41", tc.name, got)
		}
		tc.fs.free(t)
		if err := tc.save(); err != nil {
			t.Fatalf("%s once space was freed: %v\n%s", tc.name, err, d.logTail())
		}
	}
}

// notFound turns a lookup that should have found nothing into an error.
func notFound[T any](v T, err error) error {
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("want not found, got %+v, %v", v, err)
}

// dirNames lists dir's entries but the filler, sorted, with a space
// before each.
func dirNames(dir string) string {
	ents, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range ents {
		if e.Name() != ".e2e-filler" {
			b.WriteString(" " + e.Name())
		}
	}
	return b.String()
}
