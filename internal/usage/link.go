package usage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cove-sandbox/cove/internal/netns"
)

// LinkCounters reads the byte counters of the links in the named network
// namespace, a sandbox's host end (its veth's or tap's peer), summed over
// every link but loopback, and turns them round to the sandbox's side: what
// the host end sent the sandbox received. Under gVisor the daemon's agent
// connection runs over that link too, so its bytes count.
func LinkCounters(ns string) (in, out int64, err error) {
	var data []byte
	err = netns.Do(ns, func() error {
		var rerr error
		// The thread's own view: it has entered ns, the process has not.
		data, rerr = os.ReadFile("/proc/thread-self/net/dev")
		return rerr
	})
	if err != nil {
		return 0, 0, fmt.Errorf("link counters of %s: %w", ns, err)
	}
	rx, tx, err := parseNetDev(data)
	if err != nil {
		return 0, 0, fmt.Errorf("link counters of %s: %w", ns, err)
	}
	return tx, rx, nil
}

// parseNetDev sums the received and sent bytes of /proc/net/dev's links,
// loopback aside.
func parseNetDev(data []byte) (rx, tx int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok { // the two header lines
			continue
		}
		if strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			return 0, 0, fmt.Errorf("short /proc/net/dev line for %s", strings.TrimSpace(name))
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		t, err2 := strconv.ParseInt(f[8], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("bad /proc/net/dev line for %s", strings.TrimSpace(name))
		}
		rx += r
		tx += t
	}
	return rx, tx, sc.Err()
}
