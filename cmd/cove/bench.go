package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// benchReport is cove bench's JSON output. Each measurement is a row of
// Results, so new benchmarks (spawn, branch, ...) add rows, not fields.
type benchReport struct {
	Machine        benchMachine  `json:"machine"`
	Commit         string        `json:"commit"`
	Time           string        `json:"time"` // RFC 3339, UTC
	Backend        string        `json:"backend"`
	DaemonVersion  string        `json:"daemon_version"`
	RuntimeVersion string        `json:"runtime_version"`
	Accel          string        `json:"accel,omitempty"` // QEMU's accelerator: tcg or kvm
	Results        []benchResult `json:"results"`
}

// benchMachine describes the host cove bench ran on.
type benchMachine struct {
	CPU         string `json:"cpu"`
	NProc       int    `json:"nproc"`
	MemTotalMiB int64  `json:"mem_total_mib"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
}

// Units of benchResult. Lower is better for latencies, higher for rates.
const (
	unitMs   = "ms"
	unitMBps = "MB/s" // decimal megabytes per second
)

// benchResult is one measurement: a latency's or a rate's percentiles
// over N samples (a single transfer has N 1 and p50 = p99).
type benchResult struct {
	Name     string         `json:"name"`
	Unit     string         `json:"unit"`
	P50      float64        `json:"p50"`
	P99      float64        `json:"p99"`
	N        int            `json:"n"`
	Baseline *benchBaseline `json:"baseline,omitempty"`
	Target   string         `json:"target,omitempty"`
	Error    string         `json:"error,omitempty"` // the measurement failed
}

// benchBaseline is the same measurement of something cove is compared
// with, taken in the same run, in the result's unit.
type benchBaseline struct {
	Name string  `json:"name"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	N    int     `json:"n"`
}

// benchTarget is the goal for a result, where the project has one.
func benchTarget(backend, name string) string {
	if backend == "qemu" {
		// Issue 5's targets, set for TCG.
		switch name {
		case "spawn":
			return "restore p50 <= 80 ms"
		case "pss_per_child":
			return "<= 35 MiB"
		case "pool_handout":
			return "p50 <= 10 ms"
		case "branch_stopped_0", "branch_stopped_50", "branch_stopped_200":
			// The design's "pause window (source paused)": QEMU's own
			// STOP to RESUME. What the agent sees (branch_pause_*)
			// adds the guest's slowness under TCG during the pre-copy.
			return "p50 <= 10 ms"
		}
		return ""
	}
	switch name {
	case "exec":
		// Exec goes through the guest agent's open connection; it
		// should beat starting a process with runsc exec.
		return "p50 below runsc exec"
	case "spawn":
		return "cold restore p50 <= 250 ms"
	case "pool_handout":
		return "p50 <= 10 ms"
	case "spawn_100":
		return "<= 10 s"
	case "pss_per_child":
		return "<= 70 MiB"
	case "branch_pause_50":
		return "p50 <= 60 ms"
	case chainRatioName(5):
		return "<= 1.5x"
	}
	return ""
}

type benchOpts struct {
	creates       int
	execs         int
	evals         int
	baselineExecs int
	fileMiB       int

	// Snapshot benchmarks; see bench_snapshot.go.
	spawns       int   // spawn-1 samples from a snapshot without a pool
	poolHandouts int   // hand-outs from a warm pool
	poolSize     int   // of the pool hand-outs come from
	spawnN       int   // children of the one big spawn, whose Pss is measured
	spawnNs      []int // if set, several big spawns of these sizes (the last's Pss is measured)
	branches     int   // branches per dirty size
	branchMiB    []int // written in the branch source before each branch
	chainDepth   int   // deepest snapshot of the chain
	chainSamples int   // spawns timed at each depth
	// pssSettle is how long sandboxes are left idle before their
	// memory is measured.
	pssSettle time.Duration
}

func runBench(ctx context.Context, args []string) error {
	fs, c := newFlagSet("bench", "bench [flags]")
	o := benchOpts{pssSettle: 2 * time.Second}
	fs.IntVar(&o.creates, "creates", 10, "sequential single creates to time (each deleted after)")
	fs.IntVar(&o.execs, "execs", 200, "execs of `true` to time in one warm sandbox")
	fs.IntVar(&o.evals, "evals", 100, "evals of 1+1 to time")
	fs.IntVar(&o.baselineExecs, "baseline-execs", 20, "`runsc exec` calls to time as the exec baseline (gVisor only)")
	fs.IntVar(&o.fileMiB, "file-mib", 1024, "size of the file uploaded and downloaded, in MiB (0: skip)")
	fs.IntVar(&o.spawns, "spawns", 10, "single spawns from a snapshot without a pool to time (each deleted after)")
	fs.IntVar(&o.poolHandouts, "pool-handouts", 10, "hand-outs from a warm pool to time, each after the pool refilled")
	fs.IntVar(&o.poolSize, "pool-size", 3, "size of the warm pool hand-outs come from")
	fs.IntVar(&o.spawnN, "spawn-n", 100, "children to spawn in one request, then measure the Pss of (0: skip)")
	fs.IntVar(&o.branches, "branches", 5, "branches to time per dirty size")
	branchMiB := fs.String("branch-mib", "0,50,200", "MiB written in the source before each branch, comma-separated")
	fs.IntVar(&o.chainDepth, "chain-depth", 5, "depth of the snapshot chain to spawn from")
	fs.IntVar(&o.chainSamples, "chain-samples", 3, "spawns to time at each chain depth")
	only := fs.String("only", "", "run only these benchmarks, comma-separated: create, exec, eval, transfer, spawn, pool, spawn100, branch, chain")
	skip := fs.String("skip", "", "skip these benchmarks, comma-separated (names as for --only)")
	out := fs.String("out", "", "also write the JSON result to this file")
	backend := fs.String("backend", "", "empty: benchmark the running daemon; qemu: start a temporary QEMU daemon (this binary) for the run")
	accel := fs.String("accel", "tcg", "with --backend qemu: QEMU accelerator (tcg, kvm or auto)")
	imageDir := fs.String("image-dir", "/var/lib/cove/images", "with --backend qemu: where the daemon finds images (with VM artifacts)")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments %q; see cove bench -h", pos)
	}
	if min(o.creates, o.execs, o.evals, o.baselineExecs, o.fileMiB,
		o.spawns, o.poolHandouts, o.spawnN, o.branches, o.chainDepth, o.chainSamples) < 0 {
		return errors.New("counts and sizes must not be negative")
	}
	if o.poolHandouts > 0 && o.poolSize < 1 {
		return errors.New("--pool-size must be at least 1 for pool hand-outs")
	}
	if o.spawnN > apitype.MaxN {
		return fmt.Errorf("--spawn-n must be at most %d", apitype.MaxN)
	}
	switch *backend {
	case "":
	case "qemu":
		qemuBenchDefaults(fs, &o)
	default:
		return fmt.Errorf("--backend %q: want qemu, or none for the running daemon", *backend)
	}
	if o.branchMiB, err = parseMiBList(*branchMiB); err != nil {
		return fmt.Errorf("--branch-mib: %w", err)
	}
	if err := o.selectGroups(*only, *skip); err != nil {
		return err
	}
	var cl *client.Client
	var daemon string
	if *backend == "qemu" {
		logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }
		d, err := startTempDaemon(ctx, *accel, *imageDir, logf)
		if err != nil {
			return err
		}
		defer d.stop(logf)
		cl, daemon = client.New(d.url, d.key, client.WithUserAgent("cove-cli/"+version)), d.url
	} else if cl, daemon, err = c.client(); err != nil {
		return err
	}
	b := &bencher{cl: cl, o: o, log: os.Stderr}
	rep, err := b.run(ctx)
	if err != nil {
		return explain(err, daemon)
	}
	if *out != "" {
		js, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileAtomic(*out, append(js, '\n'), 0o644); err != nil {
			return err
		}
	}
	if c.json {
		err = printJSON(os.Stdout, rep)
	} else {
		err = printBenchTable(os.Stdout, rep)
	}
	if err != nil {
		return err
	}
	var failed []string
	for _, r := range rep.Results {
		if r.Error != "" {
			failed = append(failed, r.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// bencher runs the benchmarks against one daemon.
type bencher struct {
	cl  *client.Client
	o   benchOpts
	log io.Writer
}

func (b *bencher) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

// run runs every benchmark. A benchmark that fails is reported in its
// row; only failing to reach the daemon at all is an error.
func (b *bencher) run(ctx context.Context) (benchReport, error) {
	info, err := b.cl.Info(ctx)
	if err != nil {
		return benchReport{}, err
	}
	b.logf("daemon %s, backend %s, runtime %s", info.Version, info.Backend, info.RuntimeVer)
	rep := benchReport{
		Machine:        machineInfo(),
		Commit:         b.commit(ctx),
		Time:           time.Now().UTC().Format(time.RFC3339),
		Backend:        info.Backend,
		DaemonVersion:  info.Version,
		RuntimeVersion: info.RuntimeVer,
		Accel:          accelOf(info),
	}
	add := func(r benchResult) {
		r.Target = benchTarget(info.Backend, r.Name)
		rep.Results = append(rep.Results, r)
	}

	if b.o.creates > 0 {
		add(b.benchCreate(ctx, info))
	}
	if b.o.execs > 0 || b.o.evals > 0 || b.o.fileMiB > 0 {
		b.runWarm(ctx, info, add)
	}
	if b.o.snapshotsWanted() {
		b.runSnapshotBenches(ctx, info, add)
	}
	addColdBaseline(rep.Results)
	if r, ok := restoreRatio(rep.Results); ok {
		rep.Results = append(rep.Results, r)
	}
	if err := ctx.Err(); err != nil {
		// Everything made is deleted by now; a report of canceled
		// calls is worth nothing.
		return rep, fmt.Errorf("interrupted: %w", err)
	}
	return rep, nil
}

// runWarm runs the benchmarks that share one warm sandbox: exec, eval
// and file transfers.
func (b *bencher) runWarm(ctx context.Context, info apitype.Info, add func(benchResult)) {
	sbs, err := b.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 1, TTLSecs: ttlWithin(info, time.Hour)})
	for _, sb := range sbs {
		defer b.destroy(ctx, sb.ID)
	}
	if err == nil && len(sbs) != 1 {
		err = fmt.Errorf("asked for 1 sandbox, got %d", len(sbs))
	}
	if err != nil {
		err = fmt.Errorf("create the warm sandbox: %w", err)
		for _, r := range []benchResult{{Name: "exec", Unit: unitMs}, {Name: "eval", Unit: unitMs},
			{Name: "upload", Unit: unitMBps}, {Name: "download", Unit: unitMBps}} {
			r.Error = err.Error()
			add(r)
		}
		return
	}
	sb := sbs[0]
	b.logf("warm sandbox %s", sb.ID)

	if b.o.execs > 0 {
		r := b.benchExec(ctx, sb)
		if r.Error == "" && b.o.baselineExecs > 0 {
			bl, err := b.runscBaseline(ctx, info, sb.ID)
			switch {
			case err != nil:
				b.logf("no runsc baseline: %v", err)
			case bl != nil:
				r.Baseline = bl
			}
		}
		add(r)
	}
	if b.o.evals > 0 {
		add(b.benchEval(ctx, sb))
	}
	if b.o.fileMiB > 0 {
		up, down := b.benchTransfer(ctx, sb)
		add(up)
		add(down)
	}
}

// ttlWithin returns want, in seconds, or the daemon's maximum if lower,
// so that a bench that dies leaves no sandbox for long.
func ttlWithin(info apitype.Info, want time.Duration) int64 {
	s := int64(want / time.Second)
	if limit := info.Limits.MaxTTLSecs; limit > 0 && s > limit {
		s = limit
	}
	return s
}

// destroy deletes a sandbox even if ctx is canceled: an interrupted
// bench must not leave sandboxes behind.
func (b *bencher) destroy(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := b.cl.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
		b.logf("warning: delete sandbox %s: %v", id, err)
	}
}

func (b *bencher) benchCreate(ctx context.Context, info apitype.Info) benchResult {
	lat := make([]time.Duration, 0, b.o.creates)
	for i := range b.o.creates {
		t0 := time.Now()
		sbs, err := b.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 1, TTLSecs: ttlWithin(info, 10*time.Minute)})
		d := time.Since(t0)
		for _, sb := range sbs {
			b.destroy(ctx, sb.ID)
		}
		if err != nil {
			return failedResult("create", unitMs, err)
		}
		lat = append(lat, d)
		b.logf("create %d/%d: %s", i+1, b.o.creates, fmtMs(d))
	}
	return latencyResult("create", lat)
}

func (b *bencher) benchExec(ctx context.Context, sb apitype.SandboxInfo) benchResult {
	req := apitype.ExecRequest{Args: []string{"true"}, TimeoutSecs: 30}
	once := func() (time.Duration, error) {
		t0 := time.Now()
		res, err := b.cl.Exec(ctx, sb.ID, sb.Token, req)
		d := time.Since(t0)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		return d, err
	}
	lat, err := b.sample("exec", 3, b.o.execs, once)
	if err != nil {
		return failedResult("exec", unitMs, err)
	}
	return latencyResult("exec", lat)
}

func (b *bencher) benchEval(ctx context.Context, sb apitype.SandboxInfo) benchResult {
	req := apitype.EvalRequest{Code: "1+1", TimeoutSecs: 30}
	warned := false
	once := func() (time.Duration, error) {
		t0 := time.Now()
		res, err := b.cl.Eval(ctx, sb.ID, sb.Token, req)
		d := time.Since(t0)
		switch {
		case err != nil:
		case res.Error != "" || res.ExitCode != 0:
			err = fmt.Errorf("eval 1+1: exit %d: %s", res.ExitCode, res.Error)
		case strings.TrimSpace(res.Result) != "2" && !warned:
			b.logf("warning: eval 1+1 = %q", res.Result)
			warned = true
		}
		return d, err
	}
	lat, err := b.sample("eval", 1, b.o.evals, once)
	if err != nil {
		return failedResult("eval", unitMs, err)
	}
	return latencyResult("eval", lat)
}

// sample calls once warm times untimed, then n times, and returns the
// latencies.
func (b *bencher) sample(name string, warm, n int, once func() (time.Duration, error)) ([]time.Duration, error) {
	for range warm {
		if _, err := once(); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, 0, n)
	for i := range n {
		d, err := once()
		if err != nil {
			return nil, err
		}
		lat = append(lat, d)
		if (i+1)%50 == 0 && i+1 < n {
			b.logf("%s %d/%d", name, i+1, n)
		}
	}
	r := latencyResult(name, lat)
	b.logf("%s: p50 %.2f ms, p99 %.2f ms over %d", name, r.P50, r.P99, r.N)
	return lat, nil
}

// runscBaseline times `runsc exec ID true` in the warm sandbox: what an
// exec costs without cove's agent. It returns nil, nil when the backend
// has no runsc to compare with.
func (b *bencher) runscBaseline(ctx context.Context, info apitype.Info, id string) (*benchBaseline, error) {
	if info.Backend != "gvisor" || info.RunscRoot == "" || info.RunscPath == "" {
		b.logf("no runsc baseline: backend %q has no runsc root", info.Backend)
		return nil, nil
	}
	once := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// The runsc container id is the sandbox id.
		cmd := exec.CommandContext(ctx, info.RunscPath, "--root", info.RunscRoot, "exec", id, "true")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if len(msg) > 500 {
				msg = msg[:500] + "..."
			}
			return d, fmt.Errorf("%s: %w: %s (runsc needs the daemon's privileges: run cove bench as root)", cmd, err, msg)
		}
		return d, nil
	}
	lat, err := b.sample("runsc exec", 1, b.o.baselineExecs, once)
	if err != nil {
		return nil, err
	}
	r := latencyResult("runsc exec", lat)
	return &benchBaseline{Name: r.Name, P50: r.P50, P99: r.P99, N: r.N}, nil
}

// benchTransfer uploads fileMiB MiB of generated data, downloads it and
// checks that its sha256 matches.
func (b *bencher) benchTransfer(ctx context.Context, sb apitype.SandboxInfo) (up, down benchResult) {
	const path = "cove-bench.bin" // under /work
	size := int64(b.o.fileMiB) << 20
	seed := uint64(time.Now().UnixNano())

	// Hash before timing, so that the upload's rate is the transfer's.
	h := sha256.New()
	if _, err := copyBuffer(h, newBenchData(seed, size)); err != nil {
		err = fmt.Errorf("generate test data: %w", err)
		return failedResult("upload", unitMBps, err), failedResult("download", unitMBps, err)
	}
	want := h.Sum(nil)
	b.logf("uploading %s (sha256 %s)", fmtBytes(size), hex.EncodeToString(want)[:16])

	t0 := time.Now()
	fi, err := b.cl.PutFile(ctx, sb.ID, sb.Token, path, 0o644, newBenchData(seed, size), size)
	d := time.Since(t0)
	if err == nil && fi.Size != size {
		err = fmt.Errorf("uploaded %d bytes, the sandbox has %d", size, fi.Size)
	}
	if err != nil {
		err = fmt.Errorf("upload: %w", err)
		return failedResult("upload", unitMBps, err), failedResult("download", unitMBps, err)
	}
	up = rateResult("upload", size, d)
	b.logf("upload: %.1f MB/s", up.P50)

	t0 = time.Now()
	n, got, err := b.fetch(ctx, sb, path)
	d = time.Since(t0)
	switch {
	case err != nil:
		return up, failedResult("download", unitMBps, fmt.Errorf("download: %w", err))
	case n != size:
		return up, failedResult("download", unitMBps, fmt.Errorf("downloaded %d bytes, uploaded %d", n, size))
	case !bytes.Equal(got, want):
		return up, failedResult("download", unitMBps, fmt.Errorf("downloaded sha256 %x, uploaded %x", got, want))
	}
	down = rateResult("download", size, d)
	b.logf("download: %.1f MB/s, sha256 matches", down.P50)
	return up, down
}

// fetch downloads path and returns its length and sha256.
func (b *bencher) fetch(ctx context.Context, sb apitype.SandboxInfo, path string) (int64, []byte, error) {
	body, _, err := b.cl.GetFile(ctx, sb.ID, sb.Token, path)
	if err != nil {
		return 0, nil, err
	}
	defer body.Close()
	h := newAsyncHasher(sha256.New())
	n, err := copyBuffer(h, body)
	sum := h.Sum()
	return n, sum, err
}

// benchData streams size pseudo-random bytes without holding them: one
// random MiB, repeated, with each repetition's first 8 bytes replaced by
// its index so that no two MiB are alike. It costs a copy, so that the
// generator doesn't slow the upload it measures.
type benchData struct {
	block []byte
	size  int64
	off   int64
}

const benchBlock = 1 << 20

func newBenchData(seed uint64, size int64) *benchData {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	block := make([]byte, benchBlock)
	rand.NewChaCha8(key).Read(block)
	return &benchData{block: block, size: size}
}

func (d *benchData) Read(p []byte) (int, error) {
	if d.off >= d.size {
		return 0, io.EOF
	}
	i := int(d.off % benchBlock)
	n := copy(p, d.block[i:])
	if rest := d.size - d.off; int64(n) > rest {
		n = int(rest)
	}
	var stamp [8]byte
	binary.LittleEndian.PutUint64(stamp[:], uint64(d.off/benchBlock))
	for j := i; j < 8 && j < i+n; j++ {
		p[j-i] = stamp[j]
	}
	d.off += int64(n)
	return n, nil
}

// asyncHasher hashes what is written to it on its own goroutine, so that
// hashing a download overlaps reading it rather than slowing it. Sum
// must be called, once, to stop the goroutine.
type asyncHasher struct {
	h    hash.Hash
	full chan []byte
	free chan []byte
	done chan struct{}
}

func newAsyncHasher(h hash.Hash) *asyncHasher {
	const bufs = 4
	a := &asyncHasher{
		h:    h,
		full: make(chan []byte, bufs),
		free: make(chan []byte, bufs),
		done: make(chan struct{}),
	}
	for range bufs {
		a.free <- make([]byte, benchBlock)
	}
	go func() {
		defer close(a.done)
		for buf := range a.full {
			a.h.Write(buf)
			a.free <- buf[:cap(buf)]
		}
	}()
	return a
}

func (a *asyncHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		buf := <-a.free
		k := copy(buf, p)
		a.full <- buf[:k]
		p = p[k:]
	}
	return n, nil
}

// Sum waits for everything written to be hashed and returns the sum.
func (a *asyncHasher) Sum() []byte {
	close(a.full)
	<-a.done
	return a.h.Sum(nil)
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest sample that at least p% of the
// samples are at or below. It returns 0 for no samples.
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// p*n first: 99*200/100 is exactly 198, 0.99*200 need not be.
	rank := int(math.Ceil(p * float64(n) / 100))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// latencyResult summarizes latencies in milliseconds.
func latencyResult(name string, lat []time.Duration) benchResult {
	ms := make([]float64, len(lat))
	for i, d := range lat {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	return benchResult{
		Name: name,
		Unit: unitMs,
		P50:  round3(percentile(ms, 50)),
		P99:  round3(percentile(ms, 99)),
		N:    len(ms),
	}
}

// rateResult is the rate of one transfer of n bytes in d.
func rateResult(name string, n int64, d time.Duration) benchResult {
	r := round3(mbPerSec(n, d))
	return benchResult{Name: name, Unit: unitMBps, P50: r, P99: r, N: 1}
}

func failedResult(name, unit string, err error) benchResult {
	return benchResult{Name: name, Unit: unit, Error: err.Error()}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func fmtMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// fmtValue formats a result's number with its unit.
func fmtValue(v float64, unit string) string {
	if v < 10 {
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

func printBenchTable(w io.Writer, rep benchReport) error {
	fmt.Fprintf(w, "%s, %d CPUs, %d MiB, kernel %s; backend %s %s\n\n",
		rep.Machine.CPU, rep.Machine.NProc, rep.Machine.MemTotalMiB, rep.Machine.Kernel, rep.Backend, rep.RuntimeVersion)
	tw := newTable(w)
	fmt.Fprintln(tw, "METRIC\tP50\tP99\tN\tBASELINE (P50 / P99)\tTARGET")
	var errs []string
	for _, r := range rep.Results {
		if r.Error != "" {
			// Errors are long; they go below the table.
			fmt.Fprintf(tw, "%s\tfailed\t-\t-\t-\t-\n", r.Name)
			errs = append(errs, r.Name+": "+r.Error)
			continue
		}
		bl := "-"
		if r.Baseline != nil {
			bl = fmt.Sprintf("%s %s / %s", r.Baseline.Name, fmtValue(r.Baseline.P50, r.Unit), fmtValue(r.Baseline.P99, r.Unit))
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n",
			r.Name, fmtValue(r.P50, r.Unit), fmtValue(r.P99, r.Unit), r.N, bl, target)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(errs, "\n"))
	}
	return nil
}

// machineInfo describes this host from /proc; fields it can't read stay
// empty.
func machineInfo() benchMachine {
	m := benchMachine{NProc: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU = procField(string(b), "model name")
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(procField(string(b), "MemTotal"), " kB"), 10, 64)
		m.MemTotalMiB = kb / 1024
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc
// file with the given key.
func procField(s, key string) string {
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// commit returns the git commit of the working directory, if it is a
// repository, else the commit the daemon reports, else "".
func (b *bencher) commit(ctx context.Context) string {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(gctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	if v, err := b.cl.Version(ctx); err == nil {
		return v.Commit
	}
	return ""
}
