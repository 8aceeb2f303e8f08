// Package loadtest drives a cove daemon with many concurrent clients, a
// weighted mix of create, spawn, exec, files, branch and kill, and reports
// throughput, latency percentiles by operation and errors by code. It is
// the engine of `cove loadtest`.
package loadtest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The operations a client mixes.
const (
	OpCreate = "create" // a cold sandbox from the default image
	OpSpawn  = "spawn"  // a sandbox restored from Options.Snapshot
	OpExec   = "exec"   // a short command in one of the client's sandboxes
	OpFiles  = "files"  // a file put, then got back and compared
	OpBranch = "branch" // one of the client's sandboxes branched, with one child
	OpKill   = "kill"   // one of the client's sandboxes deleted
)

// opOrder lists the operations in report order.
var opOrder = []string{OpCreate, OpSpawn, OpExec, OpFiles, OpBranch, OpKill}

// Ops returns the operation names, in report order.
func Ops() []string { return slices.Clone(opOrder) }

// Mix weighs the operations: each op is drawn with probability weight /
// sum of weights. It is a pflag.Value of the form "exec=5,kill=2".
type Mix map[string]int

// DefaultMix leans on the calls agents make most, exec and files, with
// enough creates and kills to keep sandboxes coming and going.
func DefaultMix() Mix {
	return Mix{OpCreate: 1, OpSpawn: 3, OpExec: 6, OpFiles: 4, OpBranch: 1, OpKill: 3}
}

// String implements pflag.Value.
func (m Mix) String() string {
	var parts []string
	for _, op := range opOrder {
		if w, ok := m[op]; ok {
			parts = append(parts, op+"="+strconv.Itoa(w))
		}
	}
	return strings.Join(parts, ",")
}

// Set implements pflag.Value: it replaces the whole mix; an op not named
// gets weight 0.
func (m Mix) Set(s string) error {
	next := Mix{}
	for part := range strings.SplitSeq(s, ",") {
		op, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%q: want op=weight", part)
		}
		if !slices.Contains(opOrder, op) {
			return fmt.Errorf("unknown op %q: want one of %s", op, strings.Join(opOrder, ", "))
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%s: the weight must be a whole number >= 0", op, w)
		}
		next[op] = n
	}
	clear(m)
	for op, w := range next {
		m[op] = w
	}
	return nil
}

// Type implements pflag.Value.
func (m Mix) Type() string { return "mix" }

// Options is one load test.
type Options struct {
	Clients  int           // concurrent clients
	Ops      int           // operations in all, 0: bounded by Duration only
	Duration time.Duration // how long to start operations, 0: bounded by Ops only
	Mix      Mix
	// Snapshot is what spawn restores from.
	Snapshot string
	// PerClient bounds the sandboxes one client holds at once: at it, a
	// create, spawn or branch drawn is a kill instead.
	PerClient int
	// MaxSandboxes bounds the load test's sandboxes alive at once, all
	// clients together (0: what the daemon's limits allow, see Run).
	MaxSandboxes int
	// FileBytes is the size of the file the files op puts and gets.
	FileBytes int
	// DaemonPID is the daemon's process, whose RSS and open files are
	// reported before and after (0: found from the port it listens on,
	// when it runs on this host).
	DaemonPID int
	JSON      bool
}

// Defaults returns the options of a plain `cove loadtest`.
func Defaults() Options {
	return Options{Clients: 10, Duration: 30 * time.Second, Mix: DefaultMix(), Snapshot: "default",
		PerClient: 2, FileBytes: 64 << 10}
}

// Validate checks the options, naming the first bad one.
func (o Options) Validate() error {
	switch {
	case o.Clients < 1:
		return fmt.Errorf("clients must be at least 1, got %d", o.Clients)
	case o.Ops < 0:
		return fmt.Errorf("ops must not be negative, got %d", o.Ops)
	case o.Duration < 0:
		return fmt.Errorf("duration must not be negative, got %s", o.Duration)
	case o.Ops == 0 && o.Duration == 0:
		return errors.New("give a bound: a number of ops, a duration or both")
	case o.PerClient < 1:
		return fmt.Errorf("sandboxes per client must be at least 1, got %d", o.PerClient)
	case o.MaxSandboxes < 0:
		return fmt.Errorf("max sandboxes must not be negative, got %d", o.MaxSandboxes)
	case o.FileBytes < 1 || o.FileBytes > 64<<20:
		return fmt.Errorf("file size must be 1 B to 64 MiB, got %d", o.FileBytes)
	case o.DaemonPID < 0:
		return fmt.Errorf("daemon pid must not be negative, got %d", o.DaemonPID)
	}
	return o.Mix.validate(o.Snapshot)
}

// validate checks that the mix draws something and can make the
// sandboxes its other ops need.
func (m Mix) validate(snapshot string) error {
	total := 0
	for op, w := range m {
		if !slices.Contains(opOrder, op) {
			return fmt.Errorf("unknown op %q in the mix", op)
		}
		if w < 0 {
			return fmt.Errorf("%s has a negative weight", op)
		}
		total += w
	}
	if total == 0 {
		return errors.New("the mix weighs every op 0")
	}
	if m[OpCreate] == 0 && m[OpSpawn] == 0 {
		return errors.New("the mix needs create or spawn: the other ops need a sandbox")
	}
	if m[OpSpawn] > 0 && snapshot == "" {
		return errors.New("spawn needs a snapshot to restore from")
	}
	return nil
}

// weighted returns the ops of positive weight, sorted, with their
// cumulative weights, for drawing.
func (m Mix) weighted() (ops []string, cum []int) {
	names := make([]string, 0, len(m))
	for op, w := range m {
		if w > 0 {
			names = append(names, op)
		}
	}
	sort.Strings(names)
	sum := 0
	for _, op := range names {
		sum += m[op]
		ops, cum = append(ops, op), append(cum, sum)
	}
	return ops, cum
}
