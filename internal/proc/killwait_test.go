package proc

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

func TestKillWait(t *testing.T) {
	// Each is reaped as it exits, so a killed one is not left a zombie.
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		return cmd
	}
	killed, spared, gone := start(), start(), start()
	gone.Process.Kill()
	for Alive(gone.Process.Pid) {
		time.Sleep(time.Millisecond)
	}
	for _, tc := range []struct {
		name  string
		pids  []int
		still func(int) bool
		want  int
	}{
		{"one meant, one spared, one gone, a duplicate", []int{killed.Process.Pid, spared.Process.Pid, gone.Process.Pid, killed.Process.Pid},
			func(pid int) bool { return pid == killed.Process.Pid }, 1},
		{"nothing", nil, func(int) bool { return true }, 0},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := KillWait(ctx, tc.pids, tc.still)
		cancel()
		if err != nil || n != tc.want {
			t.Errorf("%s: KillWait = %d, %v; want %d", tc.name, n, err, tc.want)
		}
	}
	if Alive(killed.Process.Pid) {
		t.Error("the process meant is alive after KillWait returned")
	}
	if !Alive(spared.Process.Pid) {
		t.Error("a process still did not confirm was killed")
	}
}
