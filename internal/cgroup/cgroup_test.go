package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	empty, full, absent := filepath.Join(dir, "empty"), filepath.Join(dir, "full"), filepath.Join(dir, "absent")
	os.Mkdir(empty, 0o755)
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "f"), nil, 0o644) // a directory rmdir refuses, like a busy cgroup
	for _, tc := range []struct {
		name    string
		dirs    []string
		wantErr bool
	}{
		{"empty and absent", []string{empty, absent}, false},
		{"refused", []string{full}, true},
	} {
		if err := Remove(tc.dirs...); (err != nil) != tc.wantErr {
			t.Errorf("%s: Remove = %v, want error %v", tc.name, err, tc.wantErr)
		}
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("empty directory still there: %v", err)
	}
}

func TestRaiseCPUQuota(t *testing.T) {
	root := t.TempDir()
	write := func(dir string, files map[string]string) string {
		d := filepath.Join(root, dir)
		os.MkdirAll(d, 0o755)
		for f, c := range files {
			os.WriteFile(filepath.Join(d, f), []byte(c), 0o644)
		}
		return d
	}
	v2 := write("v2", map[string]string{"cpu.max": "100000 100000\n"})
	v2max := write("v2max", map[string]string{"cpu.max": "max 100000\n"})
	v1 := write("v1", map[string]string{"cpu.cfs_quota_us": "200000\n", "cpu.cfs_period_us": "100000\n"})
	v1none := write("v1none", map[string]string{"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"})
	mem := write("memory", map[string]string{"memory.limit_in_bytes": "1"})
	// cpu and cpuacct mounted together: one directory, two names.
	alias := filepath.Join(root, "v1alias")
	if err := os.Symlink(v1, alias); err != nil {
		t.Fatal(err)
	}
	restore, err := RaiseCPUQuota(v2, v2max, v1, alias, v1none, mem, filepath.Join(root, "absent"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(d, f string) string {
		b, _ := os.ReadFile(filepath.Join(d, f))
		return strings.TrimSpace(string(b))
	}
	for _, tc := range []struct{ dir, file, raised, restored string }{
		{v2, "cpu.max", "200000 100000", "100000 100000"},
		{v2max, "cpu.max", "max 100000", "max 100000"},
		{v1, "cpu.cfs_quota_us", "300000", "200000"},
		{v1none, "cpu.cfs_quota_us", "-1", "-1"},
	} {
		if got := read(tc.dir, tc.file); got != tc.raised {
			t.Errorf("%s raised: %q, want %q", tc.dir, got, tc.raised)
		}
		defer func() {
			if got := read(tc.dir, tc.file); got != tc.restored {
				t.Errorf("%s restored: %q, want %q", tc.dir, got, tc.restored)
			}
		}()
	}
	restore()
}

func TestOOMKills(t *testing.T) {
	root := t.TempDir()
	write := func(dir, file, content string) string {
		d := filepath.Join(root, dir)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, file), []byte(content), 0o644)
		return d
	}
	v2 := write("v2", "memory.events", "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n")
	v1 := write("v1", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	none := write("v1none", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
	cpu := write("cpu", "cpu.max", "max 100000\n")
	for _, tc := range []struct {
		name string
		dirs []string
		want int
	}{
		{"v2", []string{v2}, 2},
		{"v1", []string{v1}, 1},
		{"none", []string{none, cpu, filepath.Join(root, "absent")}, 0},
		{"both", []string{v1, v2, cpu}, 3},
	} {
		if got := OOMKills(tc.dirs...); got != tc.want {
			t.Errorf("%s: OOMKills = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestDirs: every controller's directory of the sandbox and the unified
// one, none of another sandbox's, nor of a controller without it.
func TestDirs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"cpu/cove/sb-1", "memory/cove/sb-1", "memory/cove/sb-10", "pids/cove/sb-2", "cove/sb-1"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "cgroup.controllers"), nil, 0o644) // a file, not a controller
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{"sb-1", []string{"cpu/cove/sb-1", "memory/cove/sb-1", "cove/sb-1"}},
		{"sb-3", []string{"cove/sb-3"}}, // the unified one is always named
	} {
		var want []string
		for _, w := range tc.want {
			want = append(want, filepath.Join(root, w))
		}
		if got := dirsUnder(root, tc.id); !slices.Equal(got, want) {
			t.Errorf("dirsUnder(%s) = %v, want %v", tc.id, got, want)
		}
	}
}
