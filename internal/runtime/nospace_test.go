package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestNoSpace(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"errno", syscall.ENOSPC, true},
		{"wrapped path error", fmt.Errorf("save: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), true},
		{"runsc's output", errors.New("gvisor: runsc checkpoint: exit status 128: writing image: write /s/.tmp-x/checkpoint.img: no space left on device"), true},
		{"QEMU's migration", errors.New("qemu: checkpoint sb-1: migration failed: Unable to write to file: No space left on device"), true},
		{"other errno", fmt.Errorf("save: %w", syscall.EIO), false},
		{"other text", errors.New("runsc checkpoint: exit status 1: container not running"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NoSpace(tc.err); got != tc.want {
				t.Errorf("NoSpace(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
