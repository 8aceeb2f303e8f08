package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Every sandbox gets two network namespaces joined by a veth pair: the guest
// namespace, which runsc takes over (its netstack serves the sandbox), and a
// host-side namespace from which the daemon dials the agent. Every pair has
// the same addresses and MACs, so a checkpoint taken in one pair restores
// into another. Neither namespace has any other link: no route leads out.
const (
	hostAddr  = "10.77.0.1/30"
	guestAddr = "10.77.0.2/30"
	guestIP   = "10.77.0.2"
	hostMAC   = "02:c0:7e:00:00:01"
	guestMAC  = "02:c0:7e:00:00:02"
)

const netnsDir = "/var/run/netns"

// mtu of the veth pair.
const mtu = 65000

func guestNetns(id string) string { return "cove-" + id + "-g" }
func hostNetns(id string) string  { return "cove-" + id + "-h" }

// setupNetns creates the namespace pair for a sandbox.
func setupNetns(ctx context.Context, id string) error {
	g, h := guestNetns(id), hostNetns(id)
	if err := ip(ctx, "", nil, "netns", "add", g); err != nil {
		return err
	}
	if err := ip(ctx, "", nil, "netns", "add", h); err != nil {
		return err
	}
	// A large MTU: the agent channel carries files, and netstack's cost is
	// per packet.
	hostCmds := fmt.Sprintf("link add veth0 mtu %d address %s type veth peer name eth0 mtu %d address %s netns %s\n"+
		"addr add %s dev veth0\nlink set veth0 up\nlink set lo up\n", mtu, hostMAC, mtu, guestMAC, g, hostAddr)
	if err := ip(ctx, h, strings.NewReader(hostCmds), "-batch", "-"); err != nil {
		return err
	}
	guestCmds := fmt.Sprintf("addr add %s dev eth0\nlink set eth0 up\nlink set lo up\n", guestAddr)
	return ip(ctx, g, strings.NewReader(guestCmds), "-batch", "-")
}

// teardownNetns deletes the namespace pair; deleting a namespace deletes its
// end of the veth pair, and with it the other end.
func teardownNetns(ctx context.Context, id string) error {
	var firstErr error
	for _, ns := range []string{guestNetns(id), hostNetns(id)} {
		if _, err := os.Stat(netnsDir + "/" + ns); os.IsNotExist(err) {
			continue
		}
		if err := ip(ctx, "", nil, "netns", "delete", ns); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func ip(ctx context.Context, ns string, stdin *strings.Reader, args ...string) error {
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

// dialInNetns connects to addr from inside the named network namespace. The
// socket is created while the OS thread is in that namespace and stays bound
// to it after the thread returns to the daemon's own.
func dialInNetns(ctx context.Context, ns, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is never unlocked if restoring the namespace fails, so
		// the runtime discards it instead of reusing a thread in the wrong
		// namespace.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(netnsDir + "/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open netns %s: %w", ns, err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if conn != nil {
				conn.Close()
			}
			ch <- result{err: fmt.Errorf("return from netns %s: %w", ns, err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}
