package cgroup

import (
	"os"
	"path/filepath"
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
