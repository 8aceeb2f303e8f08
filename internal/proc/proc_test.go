package proc

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestAliveAndCmdline(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	if Alive(1 << 30) {
		t.Fatal("a pid past pid_max is alive")
	}
	args, err := Cmdline(os.Getpid())
	if err != nil || len(args) == 0 || args[0] != os.Args[0] {
		t.Fatalf("Cmdline = %q, %v; want %q first", args, err, os.Args[0])
	}
}

func TestKillMatching(t *testing.T) {
	// A duration no other process on the host is sleeping for.
	arg := fmt.Sprintf("599.%d", os.Getpid())
	cmd := exec.Command("sleep", arg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	match := ArgsContain(arg)
	if pids := Find(match); !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Fatalf("Find = %v, want [%d]", pids, cmd.Process.Pid)
	}
	if n := KillMatching(match); n != 1 {
		t.Fatalf("KillMatching signalled %d, want 1", n)
	}
	cmd.Wait()
	if Alive(cmd.Process.Pid) {
		t.Fatal("still alive after KillMatching")
	}
	if pids := Find(match); len(pids) != 0 {
		t.Fatalf("Find after the kill = %v", pids)
	}
}

func TestArgsContain(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"a", "bzzc"}, true},
		{[]string{"a"}, false},
		{nil, false},
	} {
		if got := ArgsContain("zz")(tc.args); got != tc.want {
			t.Errorf("ArgsContain(zz)(%q) = %v", tc.args, got)
		}
	}
}

func TestWaitExit(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	if WaitExit(pid, 20*time.Millisecond) {
		t.Fatal("WaitExit reported a running process gone")
	}
	cmd.Process.Kill()
	// Not reaped: the zombie counts as exited.
	if !WaitExit(pid, 5*time.Second) {
		t.Fatal("WaitExit did not see a killed process exit")
	}
	cmd.Wait()
}
