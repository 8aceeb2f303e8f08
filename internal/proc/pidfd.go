package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Handle is a process opened by pidfd: unlike its pid, it can never come
// to name another process, and it tells when the process exits whether or
// not it is this one's child.
type Handle struct {
	pid int
	f   *os.File // the pidfd, non-blocking, so in Go's poller
}

// Open opens process pid. It returns os.ErrProcessDone if there is no
// such process.
func Open(pid int) (*Handle, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("proc: pid %d: %w", pid, os.ErrProcessDone)
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("proc: pid %d: %w", pid, os.ErrProcessDone)
	}
	if err != nil {
		return nil, fmt.Errorf("proc: pidfd_open %d: %w", pid, err)
	}
	return &Handle{pid: pid, f: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))}, nil
}

// Pid returns the process's pid.
func (h *Handle) Pid() int { return h.pid }

// Wait blocks until the process has exited (a zombie has), or ctx ends.
// It only watches: the exit status is its parent's to collect. One Wait
// at a time.
func (h *Handle) Wait(ctx context.Context) error {
	rc, err := h.f.SyscallConn()
	if err != nil {
		return err
	}
	h.f.SetReadDeadline(time.Time{}) // an earlier Wait's ctx may have set one
	// A deadline in the past wakes the poller's wait when ctx ends.
	stop := context.AfterFunc(ctx, func() { h.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var exited bool
	err = rc.Read(func(fd uintptr) bool {
		exited = pidfdExited(int(fd))
		return exited
	})
	if exited {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		err = errors.New("poller woke without an exit")
	}
	return fmt.Errorf("proc: wait for %d: %w", h.pid, err)
}

// pidfdExited reports whether a pidfd is readable: its process exited.
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
}

// Close releases the handle.
func (h *Handle) Close() error { return h.f.Close() }

// Await blocks until process pid has exited, or ctx ends. It returns nil
// at once when there is no such process, when pid is not positive, or
// when the process holding pid now is not the one meant: match checks its
// command line, once it is held by a pidfd, so a pid recorded earlier
// and since reused never makes Await wait on a stranger.
func Await(ctx context.Context, pid int, match func(args []string) bool) error {
	h, err := Open(pid)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	if args, err := Cmdline(pid); err != nil || !match(args) {
		return nil
	}
	return h.Wait(ctx)
}
