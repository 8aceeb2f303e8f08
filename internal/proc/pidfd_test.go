package proc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestHandleWait(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	h, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	// A live process: Wait ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a live process = %v, want the context's deadline", err)
	}

	// Killed, and reaped by its parent: Wait returns, and again at once.
	done := make(chan error, 1)
	go func() { done <- h.Wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait after the kill = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the process was killed")
	}
	if err := h.Wait(context.Background()); err != nil {
		t.Fatalf("second Wait = %v", err)
	}

	// Gone before it was opened.
	if _, err := Open(cmd.Process.Pid); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Open of an exited pid = %v, want os.ErrProcessDone", err)
	}
}

func TestHandleWaitZombie(t *testing.T) {
	// A zombie (exited, not yet reaped) has exited for Wait.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	h, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Wait(ctx); err != nil {
		t.Fatalf("Wait on a zombie = %v", err)
	}
}

func TestAwait(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	mine := ArgsContain("sleep")
	// Start returns once the child is forked, maybe before it has exec'd
	// sleep: until then its command line is this test's.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if args, err := Cmdline(pid); err == nil && mine(args) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep did not start")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for _, tc := range []struct {
		name  string
		pid   int
		match func([]string) bool
		want  error
	}{
		{"running", pid, mine, context.DeadlineExceeded},
		{"another process now", pid, ArgsContain("not-sleep"), nil},
		{"no pid", 0, mine, nil},
		{"no such process", 1 << 30, mine, nil},
	} {
		if err := Await(ctx, tc.pid, tc.match); !errors.Is(err, tc.want) {
			t.Errorf("%s: Await = %v, want %v", tc.name, err, tc.want)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := Await(context.Background(), pid, mine); err != nil {
		t.Errorf("Await after the kill = %v", err)
	}
}
