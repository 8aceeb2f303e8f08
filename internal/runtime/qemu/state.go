package qemu

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// vmDir names every path of one VM: its directory, each file in it, and
// the RAM file it keeps outside it when it builds a snapshot.
type vmDir struct {
	path string
	// shm is where a snapshot builder keeps its RAM: tmpfs, where filling
	// pages costs far less than in a disk-backed file.
	shm string
}

// vmDir names VM id's paths. The RAM file's name carries a hash of the
// state directory: ids are unique only within a daemon.
func (r *Runtime) vmDir(id string) vmDir {
	h := sha256.Sum256([]byte(r.cfg.Dir))
	return vmDir{path: filepath.Join(r.cfg.Dir, id), shm: fmt.Sprintf("/dev/shm/cove-%x-%s.mem", h[:4], id)}
}

func (d vmDir) file(name string) string { return filepath.Join(d.path, name) }

// logTail is how much of a log an error quotes.
const logTail = 600

// tail is the end of QEMU's log, for errors.
func (d vmDir) tail() string { return fsutil.Tail(d.qemuLog(), logTail) }

// The VM's files: QEMU's sockets and logs, and what the runtime records.
func (d vmDir) qmpSock() string    { return d.file("qmp.sock") }
func (d vmDir) qemuLog() string    { return d.file("qemu.log") }    // QEMU's own output
func (d vmDir) consoleLog() string { return d.file("console.log") } // the guest's serial console
func (d vmDir) stateFile() string  { return d.file("vm.json") }

// agentSock is the host side of the guest's virtio-serial port
// agentproto.SerialPort.
func (d vmDir) agentSock() string { return d.file("agent.sock") }

// mem is a clone's link of its snapshot's RAM file.
func (d vmDir) mem() string { return d.file("mem") }

// layer is a layer of the VM's qcow2 chain (layerName), layers the
// whole chain.
func (d vmDir) layer(name string) string { return d.file(name) }

func (d vmDir) layers(names []string) []string {
	paths := make([]string, len(names))
	for i, l := range names {
		paths[i] = d.layer(l)
	}
	return paths
}

// owns reports whether a process's command line names a file in the VM's
// directory: its QEMU.
func (d vmDir) owns(args []string) bool { return proc.ArgsContain(d.path + "/")(args) }

// vmState is what a VM's directory records about it (vm.json).
type vmState struct {
	ID        string   `json:"id"`
	Pid       int      `json:"pid"`
	MemPath   string   `json:"mem_path"`   // "": anonymous RAM
	MemShared bool     `json:"mem_shared"` // the VM owns MemPath (share=on)
	MemoryMiB int      `json:"memory_mib"`
	CPUs      int      `json:"cpus"`
	DiskSize  int64    `json:"disk_size"` // virtual size of the root disk
	Layers    []string `json:"layers"`    // qcow2 chain (all in the VM dir), oldest first; last is active
}

// writeState records st. It is replaced whole but not synced: a VM does
// not outlive the host, and neither need its record.
func (d vmDir) writeState(st vmState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := d.stateFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return os.Rename(tmp, d.stateFile())
}

func (d vmDir) readState() (vmState, error) {
	var st vmState
	b, err := os.ReadFile(d.stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return st, runtime.ErrNotFound
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// snapDir is a checkpoint's directory, and names the files in it.
type snapDir string

func (s snapDir) file(name string) string { return filepath.Join(string(s), name) }

// The checkpoint's files: its description, the migration stream (device
// state, and RAM unless it is in mem), the RAM a golden snapshot's clones
// map, and the empty overlay of its top layer every child starts from.
func (s snapDir) meta() string     { return s.file("snapshot.json") }
func (s snapDir) stateBin() string { return s.file("state.bin") }
func (s snapDir) mem() string      { return s.file("mem") }
func (s snapDir) overlay() string  { return s.file("overlay.qcow2") }

// layer is a hard link of a layer of the checkpointed VM's chain.
func (s snapDir) layer(name string) string { return s.file(name) }

// snapState describes a checkpoint directory (snapshot.json).
type snapState struct {
	MemoryMiB   int      `json:"memory_mib"`
	CPUs        int      `json:"cpus"`
	MemInStream bool     `json:"mem_in_stream"` // RAM is in state.bin, not in mem
	DiskSize    int64    `json:"disk_size"`
	Layers      []string `json:"layers"` // hard links of the frozen chain; last is the top
	Live        bool     `json:"live"`
}

func (s snapDir) write(ss snapState) error {
	b, _ := json.Marshal(ss)
	return os.WriteFile(s.meta(), b, 0o644)
}

func (s snapDir) read() (snapState, error) {
	var ss snapState
	b, err := os.ReadFile(s.meta())
	if err != nil {
		return ss, err
	}
	return ss, json.Unmarshal(b, &ss)
}
