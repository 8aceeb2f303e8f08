package qemu

import (
	"fmt"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/netns"
)

// openTap opens the VM's tap device in its network namespace and returns
// the queue's file, which QEMU gets as -netdev tap,fd=N: QEMU then needs
// no access to /dev/net/tun (root-only on hosts without udev) nor to the
// namespace. The flags are those QEMU itself asks for, so that a VM and
// its snapshots' clones agree on the virtio-net header.
func openTap(ns string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// As in netns.Dial: a thread that cannot return to the daemon's
		// namespace stays locked and dies with this goroutine.
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(netns.Dir + "/" + ns)
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open netns %s: %w", ns, err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		f, err := tunAttach(tapName)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if f != nil {
				f.Close()
			}
			ch <- result{err: fmt.Errorf("return from netns %s: %w", ns, err)}
			return
		}
		goruntime.UnlockOSThread()
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// tunAttach opens a queue of the tap device name in the calling thread's
// network namespace.
func tunAttach(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}
