package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is what a sandbox's cgroups say it uses. A figure the host's
// cgroups do not keep is zero.
type Usage struct {
	CPUSeconds      float64
	MemoryBytes     int64
	MemoryPeakBytes int64
	DiskWriteBytes  int64
	Pids            int64
}

// ErrNoCgroup is returned by ReadUsage for a sandbox with no cgroup.
var ErrNoCgroup = errors.New("cgroup: sandbox has no cgroup")

// ReadUsage reads sandbox id's usage from its cgroup: the unified
// directory on a v2 host, else each v1 controller's that the runtime
// made. Where the v1 hierarchy keeps no CPU accounting for the sandbox
// (QEMU makes only cpu and memory), CPU is the sum over its processes.
func ReadUsage(id string) (Usage, error) {
	if V2() {
		d := Dir("", id)
		if _, err := os.Stat(d); err != nil {
			return Usage{}, fmt.Errorf("%w: %s", ErrNoCgroup, id)
		}
		return readV2(d), nil
	}
	return readV1(func(c string) string { return Dir(c, id) })
}

func readV2(d string) Usage {
	var u Usage
	if us, ok := keyed(filepath.Join(d, "cpu.stat"), "usage_usec"); ok {
		u.CPUSeconds = float64(us) / 1e6
	}
	u.MemoryBytes, _ = single(filepath.Join(d, "memory.current"))
	u.MemoryPeakBytes, _ = single(filepath.Join(d, "memory.peak"))
	u.Pids, _ = single(filepath.Join(d, "pids.current"))
	u.DiskWriteBytes = ioStatWrites(filepath.Join(d, "io.stat"))
	return u
}

func readV1(dir func(controller string) string) (Usage, error) {
	var u Usage
	found := false
	if ns, ok := single(filepath.Join(dir("cpuacct"), "cpuacct.usage")); ok {
		u.CPUSeconds, found = float64(ns)/1e9, true
	} else if secs, ok := procsCPU(dir("cpu")); ok {
		u.CPUSeconds, found = secs, true
	}
	if v, ok := single(filepath.Join(dir("memory"), "memory.usage_in_bytes")); ok {
		u.MemoryBytes, found = v, true
		u.MemoryPeakBytes, _ = single(filepath.Join(dir("memory"), "memory.max_usage_in_bytes"))
	}
	if v, ok := single(filepath.Join(dir("pids"), "pids.current")); ok {
		u.Pids, found = v, true
	} else if n, ok := lines(filepath.Join(dir("cpu"), "tasks")); ok {
		u.Pids = n // QEMU's VM: no pids controller, count its threads
	}
	u.DiskWriteBytes = blkioWrites(filepath.Join(dir("blkio"), "blkio.throttle.io_service_bytes"))
	if !found {
		return Usage{}, ErrNoCgroup
	}
	return u, nil
}

// single reads a file holding one integer.
func single(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// lines counts the non-empty lines of a file.
func lines(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return int64(len(strings.Fields(string(b)))), true
}

// keyed reads key's value from a file of "key value" lines.
func keyed(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// ioStatWrites sums wbytes= over v2's io.stat lines ("MAJ:MIN rbytes=..
// wbytes=.. ...").
func ioStatWrites(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var n int64
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "wbytes="); ok {
			w, _ := strconv.ParseInt(v, 10, 64)
			n += w
		}
	}
	return n
}

// blkioWrites sums the per-device Write lines of v1's
// blkio.throttle.io_service_bytes ("MAJ:MIN Write N").
func blkioWrites(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "Write" {
			w, _ := strconv.ParseInt(f[2], 10, 64)
			n += w
		}
	}
	return n
}

// userHZ is the unit of /proc/PID/stat's CPU times; Linux fixes it at 100
// for user space whatever the kernel's tick.
const userHZ = 100

// procsCPU sums user and system time of the processes in cgroup d.
func procsCPU(d string) (float64, bool) {
	f, err := os.Open(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var ticks int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		b, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(sc.Text()), "stat"))
		if err != nil {
			continue // exited since
		}
		ticks += statTicks(string(b))
	}
	return float64(ticks) / userHZ, true
}

// statTicks is utime+stime of a /proc/PID/stat line. The command name,
// field 2, is in parentheses and may hold spaces: fields count from the
// last ')'.
func statTicks(stat string) int64 {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	// After ")": state is field 3, utime 14, stime 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}
