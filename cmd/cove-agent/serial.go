package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/seriallink"
)

const (
	// sysfsPorts lists the virtio-serial ports, one directory each, named
	// like their device in /dev.
	sysfsPorts = "/sys/class/virtio-ports"
	// portWait is how long the agent waits for its port to show up: the
	// virtio_console driver may still be probing when the agent starts.
	portWait = 10 * time.Second
)

// listenSerial serves on the virtio-serial port called name.
func listenSerial(ctx context.Context, name string) (net.Listener, string, error) {
	p, path, err := openPort(ctx, sysfsPorts, "/dev", name)
	if err != nil {
		return nil, "", err
	}
	// The port stays open for the life of the process: the listener's
	// reader may be blocked in it after Close.
	return seriallink.Listen(p, seriallink.Config{WaitHost: p.waitHost}), path, nil
}

// findPort returns the name of the device, under /dev, of the virtio-serial
// port called name, looked up in sysfs (normally sysfsPorts).
func findPort(sysfs, name string) (string, error) {
	dirs, err := os.ReadDir(sysfs)
	if err != nil {
		return "", err
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(sysfs, d.Name(), "name"))
		if err != nil {
			continue // a port without a name, or one going away
		}
		if strings.TrimSpace(string(b)) == name {
			return d.Name(), nil
		}
	}
	return "", fmt.Errorf("no virtio-serial port named %q: %w", name, os.ErrNotExist)
}

// openPort opens the port called name, waiting up to portWait for it to
// appear.
func openPort(ctx context.Context, sysfs, dev, name string) (*port, string, error) {
	ctx, cancel := context.WithTimeout(ctx, portWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p, path, err := tryOpenPort(sysfs, dev, name)
		if err == nil {
			return p, path, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, "", err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, "", fmt.Errorf("gave up waiting: %w", err)
		}
	}
}

// tryOpenPort opens the port called name, if it is there.
func tryOpenPort(sysfs, dev, name string) (*port, string, error) {
	dir, err := findPort(sysfs, name)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dev, dir)
	p, err := openPortFile(path)
	if err != nil {
		return nil, "", err
	}
	return p, path, nil
}

// port is a virtio-serial port's device, read and written with plain
// blocking system calls: through the runtime's poller a read of a port
// whose host is away returns 0 at once, and the listener needs a read that
// waits for data while the host is there.
type port struct {
	fd    int
	sigio chan os.Signal // SIGIO, while waitHost has O_ASYNC on
}

func openPortFile(path string) (*port, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	p := &port{fd: fd, sigio: make(chan os.Signal, 1)}
	signal.Notify(p.sigio, unix.SIGIO)
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETOWN, unix.Getpid()); err != nil {
		signal.Stop(p.sigio)
		p.sigio = nil
	}
	return p, nil
}

// waitHost waits for the host to connect: the virtio_console driver
// raises SIGIO on a port with O_ASYNC set whenever the host connects or
// hangs up. Polling instead would notice the host up to the poll interval
// late, and a restored clone's first reply waits for exactly that. O_ASYNC
// is on only while waiting because the driver also raises SIGIO for every
// buffer of data that arrives. Without SIGIO it polls, as seriallink does.
func (p *port) waitHost(ctx context.Context, n int) error {
	if p.sigio == nil || p.setAsync(true) != nil {
		return seriallink.Backoff(ctx, n)
	}
	defer p.setAsync(false)
	select {
	case <-p.sigio: // stale: from before O_ASYNC
	default:
	}
	// The host may have come back after the read that found it gone, and
	// before O_ASYNC: no SIGIO tells of that.
	if p.hostConnected() {
		return nil
	}
	// A lost SIGIO costs at most hostRecheck.
	t := time.NewTimer(hostRecheck)
	defer t.Stop()
	select {
	case <-p.sigio:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// hostRecheck is how often waitHost looks for the host when no SIGIO
// comes.
const hostRecheck = 50 * time.Millisecond

func (p *port) setAsync(on bool) error {
	fl, err := unix.FcntlInt(uintptr(p.fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_ASYNC
	} else {
		fl &^= unix.O_ASYNC
	}
	_, err = unix.FcntlInt(uintptr(p.fd), unix.F_SETFL, fl)
	return err
}

// hostConnected reports whether the host is connected: a port without its
// host polls as hung up.
func (p *port) hostConnected() bool {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	_, err := unix.Poll(fds, 0)
	return err == nil && fds[0].Revents&unix.POLLHUP == 0
}

// Read returns io.EOF when the host is not connected.
func (p *port) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(p.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of b. The driver takes at most 32 KiB a call, and a
// call blocks while the host is not connected.
func (p *port) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Write(p.fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrShortWrite
		}
		n += m
	}
	return n, nil
}

func (p *port) close() error { return unix.Close(p.fd) }
