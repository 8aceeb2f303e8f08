// Package bench measures a cove daemon: create, exec, eval and file
// transfer latencies, and the snapshot benchmarks (spawn, warm pool, many
// children and their memory, branch pauses, snapshot chains), beside
// baselines taken in the same run. It drives the daemon through its REST
// API but is a host harness too: the runsc exec baseline runs runsc and
// the memory rows read /proc, so it runs on the daemon's host, as root.
package bench

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime/gvisor"
	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Options says what to measure. A count or size of 0 turns its benchmark
// off.
type Options struct {
	Creates       int // sequential single creates, each deleted after
	Execs         int // execs of `true` in one warm sandbox
	Evals         int // evals of 1+1 in it
	BaselineExecs int // `runsc exec` calls, the exec baseline (gVisor only)
	FileMiB       int // size of the file uploaded and downloaded
	PTYEchoes     int // keystrokes echoed through a terminal, and pings beside them
	StreamMiB     int // output of the streamed exec timed

	Spawns       int     // spawns from a snapshot without a pool
	PoolHandouts int     // hand-outs from a warm pool
	PoolSize     int     // of the pool hand-outs come from
	SpawnN       int     // children of the one big spawn, whose Pss is measured
	SpawnNs      []int   // if set, several big spawns of these sizes (the last's Pss is measured)
	SpawnWith    int     // sandboxes held running while SpawnN more are spawned, then all killed
	BranchLoad   int     // busy sandboxes running during the loaded branch pauses
	Branches     int     // branches per dirty size
	BranchMiB    IntList // written in the branch source before each branch
	ChainDepth   int     // deepest snapshot of the chain
	ChainSamples int     // spawns timed at each depth
	// PssSettle is how long sandboxes are left idle before their memory
	// is measured.
	PssSettle time.Duration
	// RestartDead is how many sandboxes are killed while the daemon is
	// down for the restart benchmark, which runs only with a Restarter.
	RestartDead int
	// Restarter restarts the daemon: set for one the bench started.
	Restarter Restarter

	EgressMiB   int // downloaded from a test server, through cove's proxy and from the host
	PreviewGets int // requests timed through a preview URL, the tunnel, and directly
	DNSLookups  int // in-guest lookups timed, through cove's resolver and of /etc/hosts
	// ProcFirstBytes is how many background processes' first output byte
	// is timed.
	ProcFirstBytes int

	// TemplateBuilds is how many Dockerfile templates are built cold and
	// then again with every step cached.
	TemplateBuilds int

	TreeFiles   int // files of 4 KiB in the tree uploaded as one tar stream
	WatchEvents int // watch events timed
	// ImageImportMiB is the size of the generated OCI image whose import
	// is timed (imageimport.go).
	ImageImportMiB int
	// Pauses is how many pauses, resumes, checkpoints and rollbacks of one
	// sandbox are timed (pause.go).
	Pauses int
	// Net is the test network the network benchmarks use (StartNet);
	// nil: Run starts its own. ZoneUpstream says that the daemon resolves
	// through its zone (one the bench started with StartNet's flags),
	// which the DNS benchmark needs.
	Net          *testnet.Net
	ZoneUpstream bool

	// E2BCreates is how many Sandbox.create + first commands.run are
	// timed through the E2B SDK (e2b.go), at the facade E2B names.
	E2BCreates int
	E2B        E2BOptions

	// DensityMax is the most idle sandboxes the density benchmark holds
	// (0: off; cove bench --density turns it on alone).
	DensityMax  int
	DensityOpts DensityOptions

	// Only and Skip select benchmark groups by name (see Groups).
	Only, Skip NameList

	// Runsc and RunscRoot are the daemon's runsc and its --root, for the
	// runsc exec baseline: the daemon does not publish its host paths.
	Runsc, RunscRoot string

	Out  string // if set, the JSON report is also written to this file
	JSON bool   // print the JSON report rather than a table
}

// Defaults are the options for a run against a daemon of cove serve's
// defaults.
func Defaults() Options {
	return Options{
		Creates: 10, Execs: 200, Evals: 100, BaselineExecs: 20, FileMiB: 1024, PTYEchoes: 200, StreamMiB: 256,
		Spawns: 10, PoolHandouts: 10, PoolSize: 3, SpawnN: 100, SpawnWith: 400, BranchLoad: 2,
		Branches: 5, BranchMiB: IntList{0, 50, 200}, ChainDepth: 5, ChainSamples: 3,
		PssSettle:      2 * time.Second,
		RestartDead:    5,
		EgressMiB:      256,
		PreviewGets:    200,
		DNSLookups:     200,
		ProcFirstBytes: 100,
		TreeFiles:      5000,
		WatchEvents:    50,
		ImageImportMiB: 64,
		TemplateBuilds: 3,
		Pauses:         5,
		DensityOpts:    DensityOptions{FloorMiB: 2048, Batch: 50, Idle: 30 * time.Second},
		E2BCreates:     5,
		E2B:            E2BOptions{SDK: "/var/cache/cove/e2b-sdk/2.51.0/node_modules/e2b"},
		Runsc:          "runsc",
		// The sandboxes of cove serve's default --state-dir.
		RunscRoot: gvisor.RootDir(filepath.Join("/var/lib/cove", "sandboxes")),
	}
}

// ForQEMU turns the benchmarks that do not apply to a fresh QEMU daemon
// (or take too long under TCG) off, and spawns 10 and 50 children rather
// than 100, except for what given, the flags set on the command line,
// asks for.
func (o *Options) ForQEMU(given map[string]bool) {
	for _, c := range []struct {
		flag string
		n    *int
		v    int
	}{
		{"file-mib", &o.FileMiB, 0},
		{"chain-samples", &o.ChainSamples, 0},
		{"baseline-execs", &o.BaselineExecs, 0},
		{"egress-mib", &o.EgressMiB, 32},
		{"stream-mib", &o.StreamMiB, 64},
		{"preview-gets", &o.PreviewGets, 50},
		{"dns-lookups", &o.DNSLookups, 50},
		{"proc-first-bytes", &o.ProcFirstBytes, 30},
		{"image-import-mib", &o.ImageImportMiB, 32},
		{"template-builds", &o.TemplateBuilds, 1},
		{"pauses", &o.Pauses, 3},
		{"e2b-creates", &o.E2BCreates, 3},
		// TCG's clones are CPU-bound: hundreds held, or busy neighbours,
		// measure the emulator, not cove.
		{"spawn-with", &o.SpawnWith, 0},
		{"branch-load", &o.BranchLoad, 0},
	} {
		if !given[c.flag] {
			*c.n = c.v
		}
	}
	if !given["spawn-n"] && o.SpawnN > 0 {
		o.SpawnNs = []int{10, 50}
		o.SpawnN = 50
	}
	// Clones under TCG take longer to go quiet.
	o.PssSettle = 5 * time.Second
}

// Validate checks the counts and the names of Only and Skip.
func (o Options) Validate() error {
	if min(o.Creates, o.Execs, o.Evals, o.BaselineExecs, o.FileMiB, o.PTYEchoes, o.StreamMiB,
		o.Spawns, o.PoolHandouts, o.SpawnN, o.SpawnWith, o.BranchLoad, o.Branches, o.ChainDepth, o.ChainSamples, o.RestartDead,
		o.EgressMiB, o.PreviewGets, o.DNSLookups, o.ProcFirstBytes, o.TreeFiles, o.WatchEvents, o.ImageImportMiB, o.TemplateBuilds, o.Pauses, o.E2BCreates, o.DensityMax) < 0 {
		return errors.New("counts and sizes must not be negative")
	}
	if o.PoolHandouts > 0 && o.PoolSize < 1 {
		return errors.New("--pool-size must be at least 1 for pool hand-outs")
	}
	if o.RestartDead > apitype.MaxN {
		return fmt.Errorf("--restart-dead must be at most %d", apitype.MaxN)
	}
	if o.SpawnN > apitype.MaxN {
		return fmt.Errorf("--spawn-n must be at most %d", apitype.MaxN)
	}
	if o.DensityMax > 0 && (o.DensityOpts.Batch < 1 || o.DensityOpts.Batch > apitype.MaxN || o.DensityOpts.FloorMiB < 0 || o.DensityOpts.Idle <= 0) {
		return fmt.Errorf("--density-batch must be 1 to %d, --density-floor-mib not negative, --density-idle positive", apitype.MaxN)
	}
	if o.SpawnWith > 10*apitype.MaxN {
		return fmt.Errorf("--spawn-with must be at most %d", 10*apitype.MaxN)
	}
	return o.selectGroups() // on a copy
}

// snapshotsWanted reports whether any snapshot benchmark is to run.
func (o *Options) snapshotsWanted() bool {
	return o.Spawns > 0 || o.PoolHandouts > 0 || o.SpawnN > 0 ||
		(o.Branches > 0 && len(o.BranchMiB) > 0) || o.ChainSamples > 0
}

// Groups are the names Only and Skip take.
func Groups() []string { return slices.Sorted(maps.Keys(new(Options).groups())) }

// groups maps the names Only and Skip take to the counts that, zeroed,
// turn the group's benchmarks off.
func (o *Options) groups() map[string][]*int {
	return map[string][]*int{
		"create":   {&o.Creates},
		"exec":     {&o.Execs},
		"eval":     {&o.Evals},
		"transfer": {&o.FileMiB},
		"pty":      {&o.PTYEchoes},
		"stream":   {&o.StreamMiB}, // exec_stream
		"spawn":    {&o.Spawns},
		"pool":     {&o.PoolHandouts},
		"spawn100": {&o.SpawnN}, // and cpu_per_child_N, pss_per_child, spawn_N_with_M, kill_N
		"branch":   {&o.Branches},
		"chain":    {&o.ChainSamples},
		"restart":  {&o.RestartDead},
		"egress":   {&o.EgressMiB},
		"preview":  {&o.PreviewGets}, // and tunnel_request
		"dns":      {&o.DNSLookups},
		"procs":    {&o.ProcFirstBytes},
		"tree":     {&o.TreeFiles},
		"watch":    {&o.WatchEvents},
		"image":    {&o.ImageImportMiB}, // image_import_N
		"template": {&o.TemplateBuilds},
		"e2b":      {&o.E2BCreates}, // e2b_sdk_create_run
		"pause":    {&o.Pauses},     // and resume, checkpoint, rollback, paused_disk
		"density":  {&o.DensityMax}, // density_*, kill_N
	}
}

// selectGroups applies Only and Skip.
func (o *Options) selectGroups() error {
	groups := o.groups()
	set := func(names []string) (map[string]bool, error) {
		s := make(map[string]bool)
		for _, n := range names {
			if _, ok := groups[n]; !ok {
				return nil, fmt.Errorf("unknown benchmark %q; known: %s", n, strings.Join(Groups(), ", "))
			}
			s[n] = true
		}
		return s, nil
	}
	only, err := set(o.Only)
	if err != nil {
		return fmt.Errorf("--only: %w", err)
	}
	skip, err := set(o.Skip)
	if err != nil {
		return fmt.Errorf("--skip: %w", err)
	}
	for name, counts := range groups {
		if skip[name] || (len(only) > 0 && !only[name]) {
			for _, c := range counts {
				*c = 0
			}
		}
	}
	return nil
}

// IntList is a flag value of comma-separated whole numbers >= 0, such as
// --branch-mib's "0,50,200".
type IntList []int

// Type names the value in a flag's help.
func (l IntList) Type() string { return "list" }

func (l IntList) String() string {
	s := make([]string, len(l))
	for i, n := range l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Set parses a flag's value; the last occurrence of a flag wins.
func (l *IntList) Set(s string) error {
	var out IntList
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return fmt.Errorf("bad size %q: want MiB, a whole number >= 0", f)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// NameList is a flag value of comma-separated names, such as --only's.
type NameList []string

// Type names the value in a flag's help.
func (l NameList) Type() string { return "list" }

func (l NameList) String() string { return strings.Join(l, ",") }

// Set parses a flag's value; the last occurrence of a flag wins.
func (l *NameList) Set(s string) error {
	var out NameList
	for n := range strings.SplitSeq(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	*l = out
	return nil
}
