package loadtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcStats is what a daemon process holds: its resident memory and its
// open file descriptors, read from /proc.
type ProcStats struct {
	RSSBytes int64 `json:"rss_bytes"`
	FDs      int   `json:"fds"`
}

// readProcStats reads pid's VmRSS and counts its open descriptors.
func readProcStats(procRoot string, pid int) (ProcStats, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return ProcStats{}, fmt.Errorf("read the daemon's status: %w", err)
	}
	rss, err := vmRSS(b)
	if err != nil {
		return ProcStats{}, err
	}
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return ProcStats{}, fmt.Errorf("list the daemon's open files: %w", err)
	}
	return ProcStats{RSSBytes: rss, FDs: len(fds)}, nil
}

// vmRSS parses the "VmRSS:  1234 kB" line of /proc/PID/status.
func vmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want a number of kB", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", sc.Text(), err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmRSS line in the daemon's status")
}

// findListener returns the process listening on TCP port, found as the
// owner of the listening socket's inode in /proc/net/tcp{,6}: it takes
// permission to read other processes' fds (root, for a root daemon).
func findListener(procRoot string, port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(procRoot, f))
		if err != nil {
			continue
		}
		for _, ino := range listeningInodes(b, port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing on this host listens on port %d", port)
	}
	procs, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(procRoot, p.Name(), "fd"))
		if err != nil {
			continue // not ours to look at, or gone
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(procRoot, p.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(l, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("port %d is listened on by a process whose files this user cannot read", port)
}

// listeningInodes returns the inodes of the sockets in LISTEN state
// (0A) on port in a /proc/net/tcp table.
func listeningInodes(table []byte, port int) []string {
	var out []string
	want := fmt.Sprintf(":%04X", port)
	for i, line := range strings.Split(string(table), "\n") {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
		if i == 0 || len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out = append(out, f[9])
	}
	return out
}
