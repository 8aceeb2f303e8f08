package image

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/mount"
)

// seed writes a fake published image, as Build would leave it.
func seed(t *testing.T, dir, name, key string, created time.Time) Image {
	t.Helper()
	id := name + "-" + key[:12]
	m := Manifest{ID: id, Name: name, Key: key, Created: created}
	if err := os.MkdirAll(filepath.Join(dir, id, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(m)
	mustWrite(t, filepath.Join(dir, id, "manifest.json"), string(data))
	return Image{ID: id, Name: name, Dir: filepath.Join(dir, id), Rootfs: filepath.Join(dir, id, "rootfs"), Manifest: m}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := seed(t, dir, "default", "aaaaaaaaaaaa1111", t0)
	cur := seed(t, dir, "default", "bbbbbbbbbbbb2222", t0.Add(time.Hour))
	py := seed(t, dir, "py", "cccccccccccc3333", t0)
	for _, s := range []struct{ name, id string }{{"default", cur.ID}, {"py", py.ID}} {
		if err := setCurrent(dir, s.name, s.id); err != nil {
			t.Fatal(err)
		}
	}
	seed(t, dir, "orphan", "dddddddddddd4444", t0) // no current pointer

	tests := []struct {
		in      string
		wantID  string
		wantCur bool
		wantErr error // errors.Is target; nil means success
		anyErr  bool
	}{
		{in: "", wantID: cur.ID, wantCur: true},
		{in: "default", wantID: cur.ID, wantCur: true},
		{in: old.ID, wantID: old.ID},
		{in: cur.ID, wantID: cur.ID, wantCur: true},
		{in: "py", wantID: py.ID, wantCur: true},
		{in: "orphan", wantErr: ErrNotFound},
		{in: "nope", wantErr: ErrNotFound},
		{in: "default-000000000000", wantErr: ErrNotFound},
		{in: "../etc", anyErr: true},
		{in: ".lock", anyErr: true},
		{in: "a/b", anyErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			img, err := Resolve(dir, tt.in)
			switch {
			case tt.anyErr:
				if err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("err = %v, want a non-ErrNotFound error", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("err = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			case img.ID != tt.wantID || img.Current != tt.wantCur:
				t.Errorf("got %s current=%v, want %s current=%v", img.ID, img.Current, tt.wantID, tt.wantCur)
			case img.Rootfs != filepath.Join(dir, tt.wantID, "rootfs"):
				t.Errorf("rootfs %s", img.Rootfs)
			}
		})
	}
}

func TestResolveDanglingCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := setCurrent(dir, "default", "default-0123456789ab"); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(dir, "default"); !errors.Is(err, ErrNotFound) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := seed(t, dir, "default", "aaaaaaaaaaaa", t0)
	b := seed(t, dir, "default", "bbbbbbbbbbbb", t0.Add(2*time.Hour))
	c := seed(t, dir, "py", "cccccccccccc", t0.Add(time.Hour))
	setCurrent(dir, "default", b.ID)
	// Not images: the base cache, work in progress, stray dirs and files.
	for _, d := range []string{"base/xyz/rootfs", ".tmp-default-x/rootfs", "lost+found"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	mustWrite(t, filepath.Join(dir, ".lock"), "")

	imgs, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, img := range imgs {
		s := img.ID
		if img.Current {
			s += "*"
		}
		got = append(got, s)
	}
	want := []string{b.ID + "*", c.ID, a.ID} // newest first
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("List = %v, want %v", got, want)
	}

	if imgs, err := List(filepath.Join(dir, "missing")); err != nil || len(imgs) != 0 {
		t.Errorf("List(missing) = %v, %v", imgs, err)
	}

	// A corrupt manifest is an error, not silently skipped.
	mustWrite(t, filepath.Join(a.Dir, "manifest.json"), "{")
	if _, err := List(dir); err == nil {
		t.Error("List with corrupt manifest: no error")
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now()
	old := seed(t, dir, "default", "aaaaaaaaaaaa", t0)
	cur := seed(t, dir, "default", "bbbbbbbbbbbb", t0)
	setCurrent(dir, "default", cur.ID)

	if err := Remove(t.Context(), dir, cur.ID); !errors.Is(err, ErrCurrent) {
		t.Errorf("Remove(current) = %v, want ErrCurrent", err)
	}
	if err := Remove(t.Context(), dir, old.ID); err != nil {
		t.Fatalf("Remove(old) = %v", err)
	}
	if _, err := os.Stat(old.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old image still there: %v", err)
	}
	if err := Remove(t.Context(), dir, old.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove(removed) = %v, want ErrNotFound", err)
	}
	if err := Remove(t.Context(), dir, "../x"); err == nil {
		t.Error("Remove(../x): no error")
	}
	if img, err := Resolve(dir, ""); err != nil || img.ID != cur.ID {
		t.Errorf("Resolve after Remove = %v %v", img.ID, err)
	}
	if left := tmpEntries(t, dir); len(left) > 0 {
		t.Errorf("leftovers: %v", left)
	}
}

func TestSetCurrent(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{"default-aaaaaaaaaaaa", "default-bbbbbbbbbbbb", "default-bbbbbbbbbbbb"} {
		if err := setCurrent(dir, "default", id); err != nil {
			t.Fatal(err)
		}
		if got, err := readCurrent(dir, "default"); err != nil || got != id {
			t.Errorf("readCurrent = %q %v, want %q", got, err, id)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "default.current" {
		t.Errorf("dir holds %v, want only default.current", ents)
	}
}

// TestRemoveTreeUnmounts checks the guard that keeps a cleanup from
// descending into a mount left in a dead build's rootfs.
func TestRemoveTreeUnmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	root := filepath.Join(t.TempDir(), ".tmp-build")
	mnt := filepath.Join(root, "rootfs/proc")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if err := removeTree(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("still there: %v", err)
	}
	if m, _ := mount.Under(root); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}
}
