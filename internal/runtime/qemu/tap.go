package qemu

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/netns"
)

// Each VM has its own network namespace, netns.Name(id, netnsRole),
// holding one tap device with the host side's address of every sandbox's
// link (netns.HostAddr and the rest).
const (
	netnsRole = "v"
	tapName   = "tap0"
)

// makeNetns makes the VM's namespace and its tap, which belongs to the
// user QEMU runs as.
func (l *launch) makeNetns(ctx context.Context) error {
	ns := netns.Name(l.spec.ID, netnsRole)
	if err := netns.Add(ctx, ns); err != nil {
		return fmt.Errorf("qemu: network: %w", err)
	}
	// The guest's kernel has no IPv6 (ipv6.disable=1); the tap gets none
	// either, so the host end has no fe80:: link-local to answer on.
	if err := netns.DisableIPv6(ns, "default"); err != nil {
		return fmt.Errorf("qemu: network: %w", err)
	}
	owner := ""
	if uid, gid, _ := l.r.qemuUser(l.spec.ID); uid >= 0 {
		owner = fmt.Sprintf(" user %d group %d", uid, gid)
	}
	cmds := fmt.Sprintf("tuntap add dev %s mode tap%s\nlink set %s address %s mtu %d\naddr add %s dev %s\nlink set %s up\nlink set lo up\n",
		tapName, owner, tapName, netns.HostMAC, netns.MTU, netns.HostAddr, tapName, tapName)
	if err := netns.IP(ctx, ns, strings.NewReader(cmds), "-batch", "-"); err != nil {
		return fmt.Errorf("qemu: network: %w", err)
	}
	return nil
}

// openTap opens the VM's tap device in its network namespace and returns
// the queue's file, which QEMU gets as -netdev tap,fd=N: QEMU then needs
// no access to /dev/net/tun (root-only on hosts without udev) nor to the
// namespace. The flags are those QEMU itself asks for, so that a VM and
// its snapshots' clones agree on the virtio-net header.
func openTap(ns string) (*os.File, error) {
	var f *os.File
	err := netns.Do(ns, func() error {
		var err error
		f, err = tunAttach(tapName)
		return err
	})
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	return f, nil
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

// Netns implements runtime.Runtime: the VM's namespace, which holds the
// host end of its tap.
func (r *Runtime) Netns(id string) string { return netns.Name(id, netnsRole) }
