// Package netns holds the network-namespace helpers the backends share:
// the addresses every sandbox's link has, running ip(8), and doing work
// (dialling, opening a tap) from inside a named namespace.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Every sandbox's link has the same addresses and MACs, whichever backend
// runs it, so that a checkpoint taken in one namespace restores into
// another. The host side is the sandbox's own namespace, never the host's.
const (
	HostAddr  = "10.77.0.1/30"
	GuestAddr = "10.77.0.2/30"
	GuestIP   = "10.77.0.2"
	// HostIP is the guest's gateway and resolver: the daemon answers
	// there, inside the host-side namespace.
	HostIP   = "10.77.0.1"
	HostMAC  = "02:c0:7e:00:00:01"
	GuestMAC = "02:c0:7e:00:00:02"
	// MTU is large: the agent channel carries files, and a user-space
	// netstack's cost is per packet.
	MTU = 65000
)

// Dir is where ip(8) keeps named namespaces.
const Dir = "/var/run/netns"

// Name is the name of one of a sandbox's namespaces; role tells a
// sandbox's several namespaces apart (one letter: g, h, v).
func Name(id, role string) string { return "cove-" + id + "-" + role }

// Exists reports whether the named namespace exists.
func Exists(ns string) bool {
	_, err := os.Stat(Dir + "/" + ns)
	return err == nil
}

// IP runs ip(8), inside namespace ns unless it is empty, with stdin if
// not nil, bounded by a timeout.
func IP(ctx context.Context, ns string, stdin *strings.Reader, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Do runs fn on an OS thread that has entered the named namespace. What fn
// creates there (a socket, a tap's file) stays bound to the namespace after
// the thread returns to the daemon's own. If fn's result must be released
// when the thread cannot return, fn's caller gets the error and fn's result
// both; Do itself only reports the failure.
func Do(ns string, fn func() error) error {
	return onThread(func() error {
		target, err := os.Open(Dir + "/" + ns)
		if err != nil {
			return fmt.Errorf("open netns %s: %w", ns, err)
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", ns, err)
		}
		return nil
	}, fn)
}

// onThread runs fn on an OS thread of its own that enter has moved into
// another network namespace, then moves the thread back to the daemon's.
// A thread that cannot return is never unlocked, so the runtime discards
// it instead of reusing a thread in the wrong namespace.
func onThread(enter, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			// Setns and unshare change nothing when they fail.
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- errors.Join(fnErr, fmt.Errorf("return to the daemon's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		ch <- fnErr
	}()
	return <-ch
}

// ipv6Conf is where a namespace's IPv6 settings are, per interface, as
// seen by a thread inside it (sysctl's net tree follows the caller's
// namespace, not the mount's).
const ipv6Conf = "/proc/sys/net/ipv6/conf/"

// DisableIPv6 sets disable_ipv6 in namespace ns for each named interface
// ("default": links made there later; "all": every link). A link with IPv6
// off gets no link-local fe80:: address, so nothing on a sandbox's link
// speaks IPv6 or announces itself over it: the sandbox's side is IPv4 only
// and its host side answers nothing. Disabling "default" before a link is
// made keeps its address from ever appearing, not even for a moment. A host
// without IPv6 has nothing to disable.
func DisableIPv6(ns string, ifaces ...string) error {
	return Do(ns, func() error { return DisableIPv6Here(ifaces...) })
}

// DisableIPv6Here is DisableIPv6 for the namespace of the calling thread,
// which must be locked to it (a function Do runs).
func DisableIPv6Here(ifaces ...string) error {
	if _, err := os.Stat(ipv6Conf); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, ifc := range ifaces {
		if ifc == "" || ifc == "." || ifc == ".." || strings.Contains(ifc, "/") {
			return fmt.Errorf("disable IPv6: bad interface name %q", ifc)
		}
		if err := os.WriteFile(ipv6Conf+ifc+"/disable_ipv6", []byte("1\n"), 0); err != nil {
			return fmt.Errorf("disable IPv6 on %s: %w", ifc, err)
		}
	}
	return nil
}

// IPv6Disabled reports whether IPv6 is off for interface ifc in namespace
// ns (or the host has none).
func IPv6Disabled(ns, ifc string) (bool, error) {
	var off bool
	err := Do(ns, func() error {
		b, err := os.ReadFile(ipv6Conf + ifc + "/disable_ipv6")
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(ipv6Conf); errors.Is(serr, fs.ErrNotExist) {
				off = true
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("netns %s: %w", ns, err)
		}
		off = strings.TrimSpace(string(b)) == "1"
		return nil
	})
	return off, err
}

// Dial connects to addr from inside the named network namespace.
func Dial(ctx context.Context, ns, addr string) (net.Conn, error) {
	var conn net.Conn
	err := Do(ns, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		conn = c
		return err
	})
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	return conn, nil
}
