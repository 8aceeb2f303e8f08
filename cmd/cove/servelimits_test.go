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
