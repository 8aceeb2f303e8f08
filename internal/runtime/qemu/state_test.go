package qemu

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/runtime"
)

func TestVMDirPaths(t *testing.T) {
	r := &Runtime{cfg: Config{Dir: "/s"}}
	d := r.vmDir("vm1")
	for _, tc := range []struct{ got, want string }{
		{d.path, "/s/vm1"},
		{d.qmpSock(), "/s/vm1/qmp.sock"},
		{d.agentSock(), "/s/vm1/agent.sock"},
		{d.qemuLog(), "/s/vm1/qemu.log"},
		{d.consoleLog(), "/s/vm1/console.log"},
		{d.stateFile(), "/s/vm1/vm.json"},
		{d.mem(), "/s/vm1/mem"},
		{d.layer("disk-0.qcow2"), "/s/vm1/disk-0.qcow2"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if got := d.layers([]string{"disk-0.qcow2", "disk-2.qcow2"}); !reflect.DeepEqual(got, []string{"/s/vm1/disk-0.qcow2", "/s/vm1/disk-2.qcow2"}) {
		t.Errorf("layers = %q", got)
	}
	// The RAM file is outside the directory, and another daemon's VM of
	// the same id has its own.
	other := (&Runtime{cfg: Config{Dir: "/t"}}).vmDir("vm1")
	if !strings.HasPrefix(d.shm, "/dev/shm/") || !strings.HasSuffix(d.shm, "-vm1.mem") || d.shm == other.shm {
		t.Errorf("RAM files %q and %q", d.shm, other.shm)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"qemu", "-qmp", "unix:/s/vm1/qmp.sock,server=on"}, true},
		{[]string{"qemu", "-qmp", "unix:/s/vm10/qmp.sock,server=on"}, false},
		{[]string{"sleep", "/s/vm1"}, false},
	} {
		if got := d.owns(tc.args); got != tc.want {
			t.Errorf("owns(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestStateFiles(t *testing.T) {
	d := vmDir{path: t.TempDir()}
	if _, err := d.readState(); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("readState of a VM without vm.json: %v, want ErrNotFound", err)
	}
	st := vmState{ID: "vm1", Pid: 42, MemoryMiB: 256, CPUs: 2, DiskSize: 1 << 30, Layers: []string{"disk-0.qcow2", "disk-3.qcow2"}}
	for range 2 { // the second replaces the first
		if err := d.writeState(st); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := d.readState(); err != nil || !reflect.DeepEqual(got, st) {
		t.Fatalf("readState = %+v, %v; want %+v", got, err, st)
	}
	if tmp, _ := filepath.Glob(d.stateFile() + ".*"); len(tmp) != 0 {
		t.Fatalf("left behind: %v", tmp)
	}

	s := snapDir(t.TempDir())
	if _, err := s.read(); err == nil {
		t.Fatal("read of a directory without snapshot.json succeeded")
	}
	ss := snapState{MemoryMiB: 256, CPUs: 1, MemInStream: true, DiskSize: 1 << 30, Layers: []string{"disk-0.qcow2"}, Live: true}
	if err := s.write(ss); err != nil {
		t.Fatal(err)
	}
	if got, err := s.read(); err != nil || !reflect.DeepEqual(got, ss) {
		t.Fatalf("read = %+v, %v; want %+v", got, err, ss)
	}
}
