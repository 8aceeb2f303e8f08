package proc

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestParseSession(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want int
		ok   bool
	}{
		{"42 (bash) S 1 42 42 34816 42 4194560", 42, true},
		{"7 (a) b) c) R 1 7 99 0", 99, true},
		{"7 (short) R 1", 0, false},
		{"no parens", 0, false},
	} {
		got, err := parseSession(tc.stat)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSession(%q) = %d, %v; want %d, ok %v", tc.stat, got, err, tc.want, tc.ok)
		}
	}
}

func TestInSession(t *testing.T) {
	// A session of its own: a shell that leaves a child running.
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sid := cmd.Process.Pid
	t.Cleanup(func() { SignalSession(sid, syscall.SIGKILL); cmd.Wait() })
	if got, err := Session(sid); err != nil || got != sid {
		t.Fatalf("Session(%d) = %d, %v; want its own", sid, got, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(InSession(sid)) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	pids := InSession(sid)
	if len(pids) != 3 || !slices.Contains(pids, sid) {
		t.Fatalf("InSession(%d) = %v; want the shell and its two sleeps", sid, pids)
	}
	if own, _ := Session(os.Getpid()); own == sid {
		t.Fatal("the test runs in the new session")
	}
	if n := SignalSession(sid, syscall.SIGKILL); n != 3 {
		t.Errorf("SignalSession signalled %d, want 3", n)
	}
	cmd.Wait()
	for len(InSession(sid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the sleeps were reparented: someone else reaps them
	}
	if pids := InSession(sid); len(pids) != 0 {
		t.Errorf("after SIGKILL, session %d still has %v", sid, pids)
	}
}
