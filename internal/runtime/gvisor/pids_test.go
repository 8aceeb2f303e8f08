package gvisor

import (
	"os"
	"slices"
	"testing"
)

// TestRecordedPids: Destroy finds a sandbox's processes where runsc
// records them, with no runsc call, and survives records half written.
func TestRecordedPids(t *testing.T) {
	for _, tc := range []struct {
		name         string
		pidFile      string
		state        string
		want         []int
		wantWaitsFor int
	}{
		{"pid file and state", "101\n", `{"goferPid":100,"sandbox":{"pid":101}}`, []int{100, 101, 101}, 101},
		{"state only (an earlier daemon's sandbox)", "", `{"goferPid":100,"sandbox":{"pid":101}}`, []int{100, 101}, 0},
		{"pid file only (state not yet written)", "101", "", []int{101}, 101},
		{"torn records", "10", `{"goferPid":`, []int{10}, 10},
		{"nothing", "", "", nil, 0},
	} {
		dir := t.TempDir()
		r := &Runtime{dir: dir, root: RootDir(dir)}
		os.MkdirAll(r.sandboxDir("sb-1"), 0o700)
		os.MkdirAll(r.root, 0o700)
		if tc.pidFile != "" {
			os.WriteFile(r.pidFile("sb-1"), []byte(tc.pidFile), 0o600)
		}
		if tc.state != "" {
			os.WriteFile(r.stateFile("sb-1"), []byte(tc.state), 0o600)
		}
		got := r.recordedPids("sb-1")
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: recordedPids = %v, want %v", tc.name, got, tc.want)
		}
		if got := r.readPidFile("sb-1"); got != tc.wantWaitsFor {
			t.Errorf("%s: readPidFile = %d, want %d", tc.name, got, tc.wantWaitsFor)
		}
	}
}

// TestStraysTake: the processes New found are handed out by sandbox, once.
func TestStraysTake(t *testing.T) {
	root := "/state/sandboxes/.runsc"
	s := newStrays()
	s.procs = map[int][]string{
		1: {"runsc-sandbox", "--root=" + root, "--log=/state/sandboxes/sb-1/runsc.log", "boot", "sb-1"},
		2: {"runsc-gofer", "--root=" + root, "--log=/state/sandboxes/sb-1/runsc.log", "gofer"},
		3: {"runsc-sandbox", "--root=" + root, "--log=/state/sandboxes/sb-10/runsc.log", "boot", "sb-10"},
	}
	got := s.take("sb-1")
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2}) {
		t.Errorf("take(sb-1) = %v, want [1 2]", got)
	}
	if got := s.take("sb-1"); len(got) != 0 {
		t.Errorf("taken twice: %v", got)
	}
	if got := s.take("sb-10"); !slices.Equal(got, []int{3}) {
		t.Errorf("take(sb-10) = %v, want [3]", got)
	}
}
