package qemu

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestListAndDestroyIdempotent(t *testing.T) {
	dir := t.TempDir()
	r := &Runtime{cfg: Config{Dir: dir}, uid: -1, gid: -1}
	r.log = discardLogger()
	for _, n := range []string{"sb-1", "sb-2", ".tmp", "BAD"} {
		os.Mkdir(filepath.Join(dir, n), 0o700)
	}
	ids, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"sb-1", "sb-2"}) {
		t.Fatalf("List = %v", ids)
	}
	if os.Geteuid() != 0 {
		return // Destroy runs ip netns only for namespaces that exist
	}
	for range 2 {
		if err := r.Destroy(context.Background(), "sb-1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Destroy(context.Background(), "never-was"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb-1")); !os.IsNotExist(err) {
		t.Fatalf("sb-1 still there: %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestMajorVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1) (tcg)", 10},
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3) (kvm)", 7},
		{"unknown", 0},
		{"QEMU emulator version x.y", 0},
	} {
		if got := majorVersion(tc.in); got != tc.want {
			t.Errorf("majorVersion(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestMemFileHasProp(t *testing.T) {
	help := "memory-backend-file options:\n  readonly=<bool>\n  reserve=<bool>         - Reserve swap\n  rom=<OnOffAuto>        - Whether to create Read Only Memory (ROM)\n  share=<bool>\n"
	for _, tc := range []struct {
		help, prop string
		want       bool
	}{
		{help, "rom", true},
		{help, "readonly", true},
		{help, "ro", false},
		{"memory-backend-file options:\n  readonly=<bool>\n", "rom", false}, // QEMU 7.2
		{"", "rom", false},
	} {
		if got := memFileHasProp(tc.help, tc.prop); got != tc.want {
			t.Errorf("memFileHasProp(%q, %q) = %v, want %v", tc.help, tc.prop, got, tc.want)
		}
	}
}

// TestProtectRAM: with rom= a snapshot's RAM file becomes root's, readable
// by QEMU's group alone (0440, or 0400 when QEMU is root); without, it is
// QEMU's user's as before.
func TestProtectRAM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	for _, tc := range []struct {
		name     string
		romOff   bool
		uid, gid int
		wantUID  int
		wantGID  int
		wantMode os.FileMode
	}{
		{"rom, unprivileged QEMU", true, 4242, 4343, 0, 4343, 0o440},
		{"rom, root QEMU", true, -1, -1, 0, 0, 0o400},
		{"old QEMU", false, 4242, 4343, 4242, 4343, 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "mem")
			if err := os.WriteFile(p, []byte("ram"), 0o644); err != nil {
				t.Fatal(err)
			}
			r := &Runtime{uid: tc.uid, gid: tc.gid, romOff: tc.romOff}
			if err := r.protectRAM(p); err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if int(st.Uid) != tc.wantUID || int(st.Gid) != tc.wantGID || os.FileMode(st.Mode).Perm() != tc.wantMode {
				t.Errorf("owner %d:%d mode %o, want %d:%d %o", st.Uid, st.Gid, os.FileMode(st.Mode).Perm(), tc.wantUID, tc.wantGID, tc.wantMode)
			}
		})
	}
}
