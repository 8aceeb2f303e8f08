package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Label marks every sandbox and snapshot a load test makes, with the
// run's id as its value, so that what one leaves can be found.
const Label = "cove-loadtest"

// cleanupTimeout bounds deleting one sandbox or snapshot at the end, even
// after ^C.
const cleanupTimeout = 2 * time.Minute

// sandboxTTL is how long a load test's sandbox lives at most (or the
// daemon's maximum), so that a load test killed outright leaves nothing
// for long.
const sandboxTTL = 15 * time.Minute

// Run drives the daemon at daemonURL, with API key apiKey, as opts says, prints
// the report to out and logs progress to log. It refuses a daemon off
// loopback. Every sandbox and snapshot it makes is deleted before it
// returns, also when ctx is canceled (^C). It returns the report and an
// error if an op failed, something was left behind or the run was cut
// short.
func Run(ctx context.Context, daemonURL, apiKey string, opts Options, out, log io.Writer) (Report, error) {
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	if err := CheckLoopback(daemonURL); err != nil {
		return Report{}, err
	}
	// A connection kept per client, and closed before the daemon's open
	// files are counted after the run, so that they count the daemon's.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = opts.Clients
	hc := &http.Client{Transport: tr}
	cl := client.New(daemonURL, apiKey, client.WithHTTPClient(hc), client.WithUserAgent("cove-loadtest"))
	info, err := cl.Info(ctx)
	if err != nil {
		return Report{}, err
	}
	r := &runner{cl: cl, o: opts, info: info, runID: randhex.New(4), st: newStats(), log: log}
	r.maxLive = opts.sandboxCap(info)
	if opts.Mix[OpSpawn] > 0 {
		if _, err := cl.GetSnapshot(ctx, opts.Snapshot); err != nil {
			return Report{}, fmt.Errorf("snapshot %q to spawn from: %w", opts.Snapshot, err)
		}
	}
	pid, why := daemonPID(opts.DaemonPID, daemonURL)
	rep := Report{RunID: r.runID, Backend: info.Backend, DaemonVersion: info.Version, Clients: opts.Clients,
		OpsLimit: opts.Ops, DurationSecs: opts.Duration.Seconds(), MaxSandboxes: r.maxLive, Mix: opts.Mix.String()}
	rep.Daemon.PID, rep.Daemon.Unavailable = pid, why
	rep.Daemon.Before = r.procStats(&rep.Daemon, hc)
	fmt.Fprintf(log, "loadtest %s: %d clients, mix %s, at most %d sandboxes\n", r.runID, opts.Clients, opts.Mix, r.maxLive)

	t0 := time.Now()
	rep.ElapsedSecs = r.runClients(ctx).Sub(t0).Seconds()
	r.deleteSnapshots(ctx)
	rep.SweptSandboxes = r.sweep(ctx)
	rep.LeftSandboxes, rep.LeftSnapshots = r.leftovers(ctx)
	rep.Daemon.After = r.procStats(&rep.Daemon, hc)
	rep.Interrupted = ctx.Err() != nil
	r.st.fill(&rep)
	if err := rep.write(out, opts.JSON); err != nil {
		return rep, err
	}
	return rep, rep.verdict()
}

// sandboxCap is how many of its sandboxes a load test keeps alive at
// once: the option, else every client's share, within three quarters of
// what the daemon's sandbox limit and memory budget allow (the rest is
// for its warm pools and anyone else).
func (o Options) sandboxCap(info apitype.Info) int {
	if o.MaxSandboxes > 0 {
		return o.MaxSandboxes
	}
	n := o.Clients * o.PerClient
	lim := info.Limits
	if lim.MaxSandboxes > 0 {
		n = min(n, max(1, lim.MaxSandboxes*3/4))
	}
	if lim.MemoryBudgetMiB > 0 && lim.DefaultMemoryMiB > 0 {
		n = min(n, max(1, lim.MemoryBudgetMiB/lim.DefaultMemoryMiB*3/4))
	}
	return n
}

// runner is one load test in progress.
type runner struct {
	cl      *client.Client
	o       Options
	info    apitype.Info
	runID   string
	st      *stats
	log     io.Writer
	maxLive int

	claimed atomic.Int64 // ops started, against o.Ops
	live    atomic.Int64 // sandboxes alive or being made
	// queued is set while the scripted client waits for a place: the
	// others leave each place freed to it, or it could wait out the run.
	queued atomic.Bool
	seq    atomic.Int64 // for unique snapshot tags

	mu      sync.Mutex
	pending []string // branch snapshots not deleted yet, oldest first
}

// runClients runs the clients until the ops or the time run out, or ctx
// is canceled, and then deletes every sandbox they hold. It returns when
// the last op ended, before the clean-up, which is no part of the load.
func (r *runner) runClients(ctx context.Context) time.Time {
	stop, cancel := ctx, context.CancelFunc(func() {})
	if r.o.Duration > 0 {
		stop, cancel = context.WithTimeout(ctx, r.o.Duration)
	}
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	for i := range r.o.Clients {
		w := &worker{r: r, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))}
		w.ops, w.cum = r.o.Mix.weighted()
		if i == 0 {
			w.script = r.setAside(coverScript(r.o.Mix))
		}
		wg.Go(func() {
			w.loop(ctx, stop)
			mu.Lock()
			if now := time.Now(); now.After(last) {
				last = now
			}
			mu.Unlock()
			w.cleanup(ctx)
		})
	}
	wg.Wait()
	return last
}

// next claims the next op of the run, false when there is none.
func (r *runner) next(stop context.Context) bool {
	return stop.Err() == nil && r.claim()
}

func (r *runner) claim() bool { return r.o.Ops == 0 || r.claimed.Add(1) <= int64(r.o.Ops) }

// setAside claims the ops of the script up front, as many as the run has:
// the other clients, faster at ops cheaper than its first create, would
// otherwise spend the whole count before the script is through.
func (r *runner) setAside(script []string) []string {
	if r.o.Ops > 0 {
		script = script[:min(len(script), r.o.Ops)]
		r.claimed.Add(int64(len(script)))
	}
	return script
}

// acquire takes a place for one more sandbox under maxLive; a client
// without the script gets none while the scripted one waits.
func (r *runner) acquire(scripted bool) bool {
	if !scripted && r.queued.Load() {
		return false
	}
	for {
		n := r.live.Load()
		if n >= int64(r.maxLive) {
			return false
		}
		if r.live.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (r *runner) release() { r.live.Add(-1) }

// labels are what every sandbox of the run carries.
func (r *runner) labels() map[string]string { return map[string]string{Label: r.runID} }

// tagPrefix starts the tags of the run's branch snapshots (snapshots
// carry no labels).
func (r *runner) tagPrefix() string { return "loadtest-" + r.runID + "-" }

// ttl is sandboxTTL within the daemon's maximum.
func (r *runner) ttl() int64 {
	s := int64(sandboxTTL / time.Second)
	if m := r.info.Limits.MaxTTLSecs; m > 0 && s > m {
		s = m
	}
	return s
}

// forget queues the snapshot tag of a deleted branch child for deletion,
// deleting it now if nothing else needs it.
func (r *runner) forget(ctx context.Context, tag string) {
	if tag == "" {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := r.cl.DeleteSnapshot(dctx, tag); err != nil && !errors.Is(err, client.ErrNotFound) {
		// Most likely a branch of its child still needs it.
		r.mu.Lock()
		r.pending = append(r.pending, tag)
		r.mu.Unlock()
	}
}

// deleteSnapshots deletes the branch snapshots left, newest first, so
// that each goes after the snapshots branched from its children.
func (r *runner) deleteSnapshots(ctx context.Context) {
	r.mu.Lock()
	tags := r.pending
	r.pending = nil
	r.mu.Unlock()
	for pass := 0; len(tags) > 0 && pass < 3; pass++ {
		var again []string
		for i := len(tags) - 1; i >= 0; i-- {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			err := r.cl.DeleteSnapshot(dctx, tags[i])
			cancel()
			if err != nil && !errors.Is(err, client.ErrNotFound) {
				fmt.Fprintf(r.log, "loadtest: delete snapshot %s: %v\n", tags[i], err)
				again = append([]string{tags[i]}, again...)
			}
		}
		tags = again
	}
}

// sweep deletes the sandboxes of the run that the clients do not know
// of, as a create that failed after making its sandbox leaves, and
// returns their ids.
func (r *runner) sweep(ctx context.Context) []string {
	left, _ := r.leftovers(ctx)
	for _, id := range left {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		if err := r.cl.DeleteSandbox(dctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
			fmt.Fprintf(r.log, "loadtest: delete sandbox %s: %v\n", id, err)
		}
		cancel()
	}
	return left
}

// leftovers lists the run's sandboxes and snapshots still there.
func (r *runner) leftovers(ctx context.Context) (sandboxes, snapshots []string) {
	sandboxes, snapshots = []string{}, []string{}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	sbs, err := r.cl.ListSandboxes(lctx)
	if err != nil {
		fmt.Fprintf(r.log, "loadtest: list sandboxes: %v\n", err)
	}
	for _, sb := range sbs {
		if sb.Labels[Label] == r.runID {
			sandboxes = append(sandboxes, sb.ID)
		}
	}
	sns, err := r.cl.ListSnapshots(lctx)
	if err != nil {
		fmt.Fprintf(r.log, "loadtest: list snapshots: %v\n", err)
	}
	for _, sn := range sns {
		if strings.HasPrefix(sn.Tag, r.tagPrefix()) {
			snapshots = append(snapshots, sn.Tag)
		}
	}
	return sandboxes, snapshots
}

// procStats reads the daemon's figures, noting in d why not if it
// cannot, after closing the connections hc keeps so that the open files
// are the daemon's own.
func (r *runner) procStats(d *DaemonStats, hc *http.Client) *ProcStats {
	if d.PID == 0 {
		return nil
	}
	hc.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond) // for the daemon to see them closed

	ps, err := readProcStats("/proc", d.PID)
	if err != nil {
		d.Unavailable = err.Error()
		return nil
	}
	return &ps
}

// daemonPID is the daemon's pid: given, or found from the port it
// listens on; 0 and why if neither.
func daemonPID(given int, daemonURL string) (int, string) {
	if given > 0 {
		return given, ""
	}
	p, err := port(daemonURL)
	if err != nil {
		return 0, err.Error()
	}
	pid, err := findListener("/proc", p)
	if err != nil {
		return 0, err.Error() + " (pass --daemon-pid)"
	}
	return pid, ""
}
