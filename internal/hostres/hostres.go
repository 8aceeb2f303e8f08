// Package hostres reads what the host has left for more sandboxes: the
// memory the kernel could still give out and the room left for tasks
// (every sandbox's processes and threads take a host pid). The sandbox
// service admits a create only while both stay clear of their floors.
package hostres

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Reading is one look at the host.
type Reading struct {
	MemTotalMiB     int64
	MemAvailableMiB int64
	// Tasks is the number of tasks (threads) on the host; TaskMax is the
	// most there may be: the lower of kernel.pid_max and
	// kernel.threads-max.
	Tasks, TaskMax int
}

// Paths are the files a Reading is made of; tests point them elsewhere.
type Paths struct {
	Meminfo, Loadavg, PidMax, ThreadsMax string
}

// ProcPaths are the host's own.
func ProcPaths() Paths {
	return Paths{
		Meminfo:    "/proc/meminfo",
		Loadavg:    "/proc/loadavg",
		PidMax:     "/proc/sys/kernel/pid_max",
		ThreadsMax: "/proc/sys/kernel/threads-max",
	}
}

// Read looks at the host through ProcPaths.
func Read() (Reading, error) { return ProcPaths().Read() }

// Read looks at the host through p.
func (p Paths) Read() (Reading, error) {
	var r Reading
	mem, err := os.ReadFile(p.Meminfo)
	if err != nil {
		return r, fmt.Errorf("hostres: %w", err)
	}
	if r.MemTotalMiB, err = meminfoMiB(mem, "MemTotal"); err != nil {
		return r, err
	}
	if r.MemAvailableMiB, err = meminfoMiB(mem, "MemAvailable"); err != nil {
		return r, err
	}
	if r.Tasks, err = loadavgTasks(p.Loadavg); err != nil {
		return r, err
	}
	pidMax, err := readInt(p.PidMax)
	if err != nil {
		return r, err
	}
	threadsMax, err := readInt(p.ThreadsMax)
	if err != nil {
		return r, err
	}
	r.TaskMax = min(pidMax, threadsMax)
	return r, nil
}

// meminfoMiB is field of /proc/meminfo's text b, in MiB.
func meminfoMiB(b []byte, field string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("hostres: meminfo %s: %w", field, err)
		}
		return kb >> 10, nil
	}
	return 0, fmt.Errorf("hostres: meminfo has no %s", field)
}

// loadavgTasks is the task count of /proc/loadavg ("0.00 0.01 0.05 1/123 456"):
// the number after the slash counts every thread on the host.
func loadavgTasks(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("hostres: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, fmt.Errorf("hostres: %s: unexpected %q", path, b)
	}
	_, total, ok := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(total)
	if !ok || err != nil {
		return 0, fmt.Errorf("hostres: %s: unexpected %q", path, b)
	}
	return n, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("hostres: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("hostres: %s: %w", path, err)
	}
	return n, nil
}
