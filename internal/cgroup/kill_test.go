package cgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/proc"
)

func TestProcs(t *testing.T) {
	root := t.TempDir()
	dir := func(name, procs string) string {
		d := filepath.Join(root, name)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(procs), 0o644)
		return d
	}
	a, b, empty := dir("a", "10\n11\n"), dir("b", "11\n12\n"), dir("empty", "")
	for _, tc := range []struct {
		name string
		dirs []string
		want []int
	}{
		{"union, each once", []string{a, b}, []int{10, 11, 12}},
		{"empty and gone", []string{empty, filepath.Join(root, "gone")}, nil},
	} {
		got, err := Procs(tc.dirs...)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: Procs = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestKill kills, in a real cgroup, a shell that forks all the time: every
// process, its children too, is gone when Kill returns.
func TestKill(t *testing.T) {
	d := filepath.Join(Root, "pids", "cove-test-kill-"+strconv.Itoa(os.Getpid()))
	if V2() {
		d = filepath.Join(Root, "cove-test-kill-"+strconv.Itoa(os.Getpid()))
	}
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Skipf("cannot make a cgroup (needs root): %v", err)
	}
	defer Remove(d)
	cmd := exec.Command("sh", "-c", `echo $$ > "$1"/cgroup.procs && while :; do sleep 60 & sleep 0.01; done`, "sh", d)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() { cmd.Process.Kill(); <-done }()
	for {
		pids, _ := Procs(d)
		if len(pids) >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Kill(ctx, d)
	if err != nil || n < 3 {
		t.Fatalf("Kill = %d, %v; want at least 3 killed", n, err)
	}
	if pids, _ := Procs(d); len(pids) != 0 {
		t.Errorf("cgroup still holds %v", pids)
	}
	if proc.Alive(cmd.Process.Pid) {
		t.Error("the shell is alive")
	}
	if err := Remove(d); err != nil {
		t.Errorf("the emptied cgroup cannot be removed: %v", err)
	}
}

func TestRaiseCPUWeight(t *testing.T) {
	root := t.TempDir()
	write := func(name, file, content string) string {
		d := filepath.Join(root, name)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, file), []byte(content), 0o644)
		return d
	}
	v2 := write("v2", "cpu.weight", "100\n")
	v2top := write("v2top", "cpu.weight", "5000\n")
	v1 := write("v1", "cpu.shares", "1024\n")
	mem := write("memory", "memory.limit_in_bytes", "1")
	alias := filepath.Join(root, "alias")
	os.Symlink(v1, alias)
	restore, err := RaiseCPUWeight(8, v2, v2top, v1, alias, mem, filepath.Join(root, "gone"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(d, f string) string {
		b, _ := os.ReadFile(filepath.Join(d, f))
		return strings.TrimSpace(string(b))
	}
	for _, tc := range []struct{ dir, file, raised, old string }{
		{v2, "cpu.weight", "800", "100"},
		{v2top, "cpu.weight", "10000", "5000"}, // the kernel's bound
		{v1, "cpu.shares", "8192", "1024"},     // once, though named twice
	} {
		if got := read(tc.dir, tc.file); got != tc.raised {
			t.Errorf("%s raised: %s, want %s", tc.dir, got, tc.raised)
		}
		defer func() {
			if got := read(tc.dir, tc.file); got != tc.old {
				t.Errorf("%s restored: %s, want %s", tc.dir, got, tc.old)
			}
		}()
	}
	restore()
}
