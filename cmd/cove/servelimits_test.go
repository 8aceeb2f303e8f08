package main

import (
	"strings"
	"testing"
)

func TestResolveLimits(t *testing.T) {
	ok := serveFlags{defaultDisk: 4096, maxDisk: 65536, defaultPids: 1024, maxPids: 8192, openFiles: 4096, overcommit: 4}
	tests := []struct {
		name    string
		edit    func(*serveFlags)
		wantErr string
	}{
		{"defaults", func(*serveFlags) {}, ""},
		{"explicit budget", func(f *serveFlags) { f.memBudget, f.overcommit = 1024, 0 }, ""},
		{"disk default over max", func(f *serveFlags) { f.defaultDisk = 70000 }, "--default-disk-mib"},
		{"disk default under min", func(f *serveFlags) { f.defaultDisk = 1 }, "--default-disk-mib"},
		{"pids default over max", func(f *serveFlags) { f.maxPids = 100 }, "--default-pids"},
		{"open files too few", func(f *serveFlags) { f.openFiles = 3 }, "--open-files"},
		{"negative budget", func(f *serveFlags) { f.memBudget = -1 }, "--memory-budget-mib"},
		{"no overcommit", func(f *serveFlags) { f.overcommit = 0 }, "--memory-overcommit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.edit(&f)
			before := f.memBudget
			err := f.resolveLimits()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case before > 0 && f.memBudget != before:
				t.Errorf("budget %d, want the flag's %d", f.memBudget, before)
			case before == 0 && f.memBudget < 1024: // 4 × the host's memory
				t.Errorf("default budget %d MiB", f.memBudget)
			}
		})
	}
}

func TestResolveHostLimits(t *testing.T) {
	cost := hostCost("gvisor")
	tests := []struct {
		name      string
		max       int
		floor     int64
		wantErr   string
		wantMax   int   // 0: derived from the host
		wantFloor int64 // -1: derived from the host
	}{
		{"auto", 0, -1, "", 0, -1},
		{"given", 700, 2048, "", 700, 2048},
		{"no floor", 10, 0, "", 10, 0},
		{"negative cap", -1, -1, "--max-sandboxes", 0, 0},
		{"floor below -1", 10, -2, "--host-memory-floor-mib", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := serveFlags{maxSandboxes: tc.max, hostFloor: tc.floor}
			err := f.resolveHostLimits(cost)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantMax > 0 && f.maxSandboxes != tc.wantMax || f.maxSandboxes <= 0 {
				t.Errorf("max sandboxes %d, want %d (0: derived)", f.maxSandboxes, tc.wantMax)
			}
			if tc.wantFloor >= 0 && f.hostFloor != tc.wantFloor || f.hostFloor < 1024 && tc.wantFloor < 0 {
				t.Errorf("floor %d MiB, want %d (-1: at least 1024)", f.hostFloor, tc.wantFloor)
			}
		})
	}
}
