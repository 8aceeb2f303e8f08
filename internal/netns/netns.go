// Package netns holds the network-namespace helpers the backends share:
// running ip(8) and dialling from inside a named namespace.
package netns

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

// Dir is where ip(8) keeps named namespaces.
const Dir = "/var/run/netns"

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

// Dial connects to addr from inside the named network namespace. The
// socket is created while the OS thread is in that namespace and stays bound
// to it after the thread returns to the daemon's own.
func Dial(ctx context.Context, ns, addr string) (net.Conn, error) {
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
		target, err := os.Open(Dir + "/" + ns)
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
