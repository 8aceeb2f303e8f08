package proc

import (
	"context"
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

// TestKillAllMatching: a parent that keeps forking marked children is
// killed, and so is every child, also one forked after the first look.
func TestKillAllMatching(t *testing.T) {
	mark := fmt.Sprintf("cove-proc-test-%d", time.Now().UnixNano())
	child := "sleep 1000; : " + mark
	cmd := exec.Command("sh", "-c", `while :; do sh -c "$1" & sleep 0.01; done`, mark, child)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait() // reap the parent: a zombie is not alive, but be tidy
	match := ArgsContain(mark)
	for deadline := time.Now().Add(5 * time.Second); len(Find(match)) < 4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the children did not start: %v", Find(match))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := KillAllMatching(ctx, match)
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Errorf("signalled %d processes, want the parent and at least 3 children", n)
	}
	if left := Find(match); len(left) > 0 {
		t.Fatalf("still running after KillAllMatching: %v", left)
	}
	if n, err := KillAllMatching(ctx, match); n != 0 || err != nil {
		t.Fatalf("with nothing left: %d, %v", n, err)
	}
}
