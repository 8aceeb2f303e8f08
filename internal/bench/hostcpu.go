package bench

// What the host spends: its busy CPU time, read around a benchmark so that
// a row can say what each sandbox cost, not only how long it took.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTick = 100

// hostCPU returns the CPU time all the host's cores have spent busy since
// boot: /proc/stat's first line without idle and iowait.
func hostCPU() (time.Duration, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, fmt.Errorf("/proc/stat: empty")
	}
	return parseCPULine(sc.Text())
}

// parseCPULine sums the busy fields of /proc/stat's "cpu" line: user, nice,
// system, irq, softirq and steal (guest time is within user already).
func parseCPULine(line string) (time.Duration, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // skip idle (4) and iowait (5)
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// cpuMeter measures the host's busy CPU time over a stretch of work.
type cpuMeter struct {
	start time.Duration
	err   error
}

func startCPU() cpuMeter {
	t, err := hostCPU()
	return cpuMeter{start: t, err: err}
}

// perItem is the busy CPU time since start, divided among n items, as a
// row in seconds.
func (m cpuMeter) perItem(name string, n int) result {
	end, err := hostCPU()
	if err == nil {
		err = m.err
	}
	if err != nil || n <= 0 {
		return failedResult(name, unitSeconds, fmt.Errorf("host CPU time: %v (over %d)", err, n))
	}
	s := round3((end - m.start).Seconds() / float64(n))
	return result{Name: name, Unit: unitSeconds, P50: s, P99: s, N: n}
}
