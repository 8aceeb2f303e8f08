package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/seriallink"
)

// fakeSysfs makes a sysfs class directory with the given ports (device
// name to port name; "" means no name file).
func fakeSysfs(t *testing.T, ports map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for dev, name := range ports {
		if err := os.Mkdir(filepath.Join(dir, dev), 0o755); err != nil {
			t.Fatal(err)
		}
		if name == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, dev, "name"), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindPort(t *testing.T) {
	sysfs := fakeSysfs(t, map[string]string{
		"vport0p0": "",
		"vport0p1": "org.qemu.guest_agent.0",
		"vport0p2": "cove.agent",
	})
	tests := []struct {
		sysfs, name string
		want        string
		notExist    bool
	}{
		{sysfs, "cove.agent", "vport0p2", false},
		{sysfs, "org.qemu.guest_agent.0", "vport0p1", false},
		{sysfs, "cove", "", true},
		{sysfs, "", "", true},
		{filepath.Join(sysfs, "missing"), "cove.agent", "", true}, // no virtio_console yet
	}
	for _, tt := range tests {
		got, err := findPort(tt.sysfs, tt.name)
		if got != tt.want || errors.Is(err, os.ErrNotExist) != tt.notExist || (err == nil) == tt.notExist {
			t.Errorf("findPort(%s, %q) = %q, %v; want %q, not-exist error %v", tt.sysfs, tt.name, got, err, tt.want, tt.notExist)
		}
	}
}

func TestOpenPortWaits(t *testing.T) {
	sysfs := filepath.Join(t.TempDir(), "virtio-ports")
	dev := t.TempDir()
	// The driver shows up late, and the device node after its sysfs entry.
	go func() {
		time.Sleep(100 * time.Millisecond)
		os.MkdirAll(filepath.Join(sysfs, "vport1p1"), 0o755)
		os.WriteFile(filepath.Join(sysfs, "vport1p1", "name"), []byte("cove.agent\n"), 0o644)
		time.Sleep(100 * time.Millisecond)
		os.WriteFile(filepath.Join(dev, "vport1p1"), nil, 0o644)
	}()
	p, path, err := openPort(context.Background(), sysfs, dev, "cove.agent")
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if want := filepath.Join(dev, "vport1p1"); path != want {
		t.Errorf("opened %s, want %s", path, want)
	}
}

func TestOpenPortGivesUp(t *testing.T) {
	sysfs := fakeSysfs(t, map[string]string{"vport0p1": "other"})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := openPort(ctx, sysfs, t.TempDir(), "cove.agent")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("openPort = %v, want a not-exist error", err)
	}
}

// socketPort returns a port on one end of a socketpair and the other end.
// The port's descriptor is never closed: a listener's reader may be in a
// read of it after the test.
func socketPort(t *testing.T) (*port, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[1]), "host")
	host, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return &port{fd: fds[0]}, host
}

func TestPortEOF(t *testing.T) {
	p, host := socketPort(t)
	if _, err := host.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	host.Close()
	b := make([]byte, 10)
	if n, err := p.Read(b); n != 2 || err != nil {
		t.Errorf("read = %d, %v; want 2, nil", n, err)
	}
	// A read of 0 bytes is the host gone: the link wants io.EOF.
	if n, err := p.Read(b); n != 0 || err != io.EOF {
		t.Errorf("read with the host gone = %d, %v; want 0, io.EOF", n, err)
	}
}

// The link over the raw descriptor: blocking reads and writes at once.
func TestPortLink(t *testing.T) {
	p, hostConn := socketPort(t)
	l := seriallink.Listen(p, seriallink.Config{})
	defer l.Close()
	defer hostConn.Close()
	host, err := seriallink.Client(hostConn)
	if err != nil {
		t.Fatal(err)
	}
	guest, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	up, down := make([]byte, 1<<20), make([]byte, 1<<20)
	rand.Read(up)
	rand.Read(down)
	errc := make(chan error, 2)
	go func() { _, err := host.Write(up); errc <- err }()
	go func() { _, err := guest.Write(down); errc <- err }()
	gotUp, gotDown := make([]byte, len(up)), make([]byte, len(down))
	go func() { _, err := io.ReadFull(guest, gotUp); errc <- err }()
	if _, err := io.ReadFull(host, gotDown); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Error("data arrived different")
	}
}
