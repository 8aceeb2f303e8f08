package agent

import (
	"log/slog"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// restoredFixups applies what a restored VM needs and gVisor does on its
// own: fresh entropy in the kernel's pool, which every clone of a snapshot
// shares, and the current time, which is as old as the snapshot. Both are
// best effort: a sandbox that cannot take them still works. urandom is
// /dev/urandom opened for writing, or nil to open it here.
func restoredFixups(log *slog.Logger, urandom *os.File, req agentproto.RestoredRequest) {
	if len(req.Seed) > 0 {
		if err := addEntropy(urandom, req.Seed); err != nil {
			log.Debug("add entropy", "err", err)
		}
	}
	if req.Hostname != "" {
		if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
			log.Debug("set hostname", "err", err)
		}
	}
	if req.TimeUnixNano > 0 {
		tv := unix.NsecToTimeval(req.TimeUnixNano)
		if err := unix.Settimeofday(&tv); err != nil {
			log.Debug("set the clock", "err", err)
		} else {
			log.Debug("clock set", "time", time.Unix(0, req.TimeUnixNano).UTC())
		}
	}
}

// addEntropy mixes seed into the kernel's RNG through f (nil: opened
// here): RNDADDENTROPY credits it and reseeds, a plain write at least
// mixes it in.
func addEntropy(f *os.File, seed []byte) error {
	if f == nil {
		var err error
		if f, err = openURandom(); err != nil {
			return err
		}
		defer f.Close()
	}
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(len(seed) * 8)
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(seed))
	copy(buf[8:], seed)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		if _, err := f.Write(seed); err != nil {
			return err
		}
	}
	// The kernel reseeds its CRNG from the pool only every so often: force
	// it, or clones read the same bytes until then.
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return errno
	}
	return nil
}

func openURandom() (*os.File, error) { return os.OpenFile("/dev/urandom", os.O_WRONLY, 0) }
