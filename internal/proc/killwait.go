package proc

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// KillWait sends SIGKILL to each of pids that still, asked once every pid
// is held by a pidfd, confirms is the process meant (so a pid recorded
// earlier and since reused is never signalled), then waits for every
// process it signalled to exit, or for ctx to end. It says how many it
// signalled. Unlike KillAllMatching it reads nothing of other processes:
// its cost is that of pids alone.
func KillWait(ctx context.Context, pids []int, still func(pid int) bool) (int, error) {
	var held []*Handle
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	seen := map[int]bool{}
	for _, pid := range pids {
		if seen[pid] || pid == os.Getpid() {
			continue
		}
		seen[pid] = true
		h, err := Open(pid)
		if errors.Is(err, os.ErrProcessDone) {
			continue
		}
		if err != nil {
			return 0, err
		}
		held = append(held, h)
	}
	// still is asked only now, after every pid is held, so it may look
	// its answers up once for all.
	var killed []*Handle
	for _, h := range held {
		if still(h.pid) && unix.PidfdSendSignal(int(h.f.Fd()), unix.SIGKILL, nil, 0) == nil {
			killed = append(killed, h)
		}
	}
	// All were signalled before any is waited for: they die together.
	for _, h := range killed {
		if err := h.Wait(ctx); err != nil {
			return len(killed), err
		}
	}
	return len(killed), nil
}
