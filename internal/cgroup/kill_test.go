package cgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
