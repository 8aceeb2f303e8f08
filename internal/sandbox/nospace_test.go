package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSaveDiskFull: a snapshot build, a branch, a checkpoint and a pause
// whose image write runs out of space fail with ErrNoSpace and a message
// saying what to do; nothing of the save is left (no directory, no temp
// entry, no store row, nothing listed) and the source sandbox runs on; the
// same save succeeds once there is room.
func TestSaveDiskFull(t *testing.T) {
	full := fmt.Errorf("runsc checkpoint: %w", &fs.PathError{Op: "write", Path: "/s/checkpoint.img", Err: syscall.ENOSPC})
	for _, tc := range []struct {
		name string
		save func(e *testEnv, src Info) error
	}{
		{"snapshot build", func(e *testEnv, _ Info) error {
			_, err := e.svc.BuildSnapshot(testCtx(t), BuildOptions{Tag: "full", Warm: "true", PoolSize: 0})
			return err
		}},
		{"branch", func(e *testEnv, src Info) error {
			_, err := e.open(t, src.ID, src.Token).Branch(testCtx(t), BranchOptions{Tag: "full", N: 1})
			return err
		}},
		{"checkpoint", func(e *testEnv, src Info) error {
			_, err := e.open(t, src.ID, src.Token).Checkpoint(testCtx(t), "full")
			return err
		}},
		{"pause", func(e *testEnv, src Info) error {
			_, err := e.svc.Pause(testCtx(t), src.ID)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			src := e.createOne(t, CreateOptions{})
			e.rt.FailNthCheckpoint(1, full)
			err := tc.save(e, src)
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), "free space") {
				t.Fatalf("save on a full disk: %v, want ErrNoSpace saying the disk is full and what to do", err)
			}
			if strings.Contains(err.Error(), "/s/checkpoint.img") {
				t.Errorf("the error shows the host's path: %v", err)
			}
			if left := saved(t, e); len(left) > 0 {
				t.Errorf("a failed save left %v", left)
			}
			if sns, _ := e.st.Snapshots(testCtx(t)); len(sns) != 0 {
				t.Errorf("a failed save left snapshot rows %+v", sns)
			}
			if cps, _ := e.st.Checkpoints(testCtx(t)); len(cps) != 0 {
				t.Errorf("a failed save left checkpoint rows %+v", cps)
			}
			if got := e.exec(t, src.ID, src.Token, "echo up"); got != "up\n" {
				t.Errorf("the source after the failed save: %q", got)
			}
			if err := tc.save(e, src); err != nil {
				t.Fatalf("the same save with room: %v", err)
			}
		})
	}
}

// saved lists every entry under the service's snapshot, checkpoint and
// paused directories.
func saved(t *testing.T, e *testEnv) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{e.svc.cfg.SnapshotDir, e.svc.cfg.CheckpointDir, e.svc.cfg.PausedDir} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && path != dir {
				out = append(out, path)
			}
			return nil
		})
	}
	return out
}
