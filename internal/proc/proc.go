// Package proc reads and signals host processes through /proc: whether
// one is alive, what its command line is, and killing those a predicate
// picks out (what a killed daemon or runtime left behind).
package proc

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which may itself hold ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// WaitExit waits up to timeout for pid to exit (a zombie has) and reports
// whether it did.
func WaitExit(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); Alive(pid); time.Sleep(5 * time.Millisecond) {
		if !time.Now().Before(deadline) {
			return false
		}
	}
	return true
}

// Cmdline returns pid's arguments.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}

// Find returns the live processes, other than this one, whose arguments
// match.
func Find(match func(args []string) bool) []int {
	return others(func(pid int) bool {
		args, err := Cmdline(pid)
		return err == nil && match(args)
	})
}

// others returns the live processes, other than this one, that pick
// chooses.
func others(pick func(pid int) bool) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if pick(pid) && Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillMatching sends SIGKILL to every process Find returns and says how
// many it signalled.
func KillMatching(match func(args []string) bool) int {
	n := 0
	for _, pid := range Find(match) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// KillAllMatching kills the processes match picks out and waits for them
// to exit, then looks again, until a look finds none or ctx ends: a
// process one of them forked between a look and its parent's death is
// found by the next look. It says how many it signalled.
func KillAllMatching(ctx context.Context, match func(args []string) bool) (int, error) {
	n := 0
	for {
		pids := Find(match)
		if len(pids) == 0 {
			return n, nil
		}
		for _, pid := range pids {
			h, err := Open(pid)
			if err != nil {
				continue // gone already
			}
			if unix.PidfdSendSignal(int(h.f.Fd()), unix.SIGKILL, nil, 0) == nil {
				n++
			}
			err = h.Wait(ctx)
			h.Close()
			if err != nil {
				return n, err
			}
		}
	}
}

// ArgsContain is a predicate for Find: some argument contains s.
func ArgsContain(s string) func([]string) bool {
	return func(args []string) bool {
		for _, a := range args {
			if strings.Contains(a, s) {
				return true
			}
		}
		return false
	}
}
