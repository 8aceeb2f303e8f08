package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Run runs the benchmarks opts selects against the daemon cl talks to,
// logging progress to log, and prints the report to out. A benchmark that
// fails is reported in its row and makes Run return an error naming it,
// after the report.
func Run(ctx context.Context, cl *client.Client, opts Options, out, log io.Writer) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	opts.selectGroups()
	b := &bencher{cl: cl, o: opts, log: log}
	rep, err := b.run(ctx)
	if err != nil {
		return err
	}
	if err := rep.write(out, opts); err != nil {
		return err
	}
	if failed := rep.failed(); len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// bencher runs the benchmarks against one daemon.
type bencher struct {
	cl  *client.Client
	o   Options
	log io.Writer
}

func (b *bencher) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

// run runs every benchmark. A benchmark that fails is reported in its
// row; only failing to reach the daemon at all is an error.
func (b *bencher) run(ctx context.Context) (report, error) {
	info, err := b.cl.Info(ctx)
	if err != nil {
		return report{}, err
	}
	b.logf("daemon %s, backend %s, runtime %s", info.Version, info.Backend, info.RuntimeVer)
	rep := report{
		Machine:        machineInfo(),
		Commit:         b.commit(ctx),
		Time:           time.Now().UTC().Format(time.RFC3339),
		Backend:        info.Backend,
		DaemonVersion:  info.Version,
		RuntimeVersion: info.RuntimeVer,
		Accel:          info.Accel,
	}
	add := func(r result) {
		r.Target = target(info.Backend, r.Name)
		rep.Results = append(rep.Results, r)
	}

	if b.o.Creates > 0 {
		add(b.benchCreate(ctx, info))
	}
	if b.o.Execs > 0 || b.o.Evals > 0 || b.o.FileMiB > 0 || b.o.PTYEchoes > 0 {
		b.runWarm(ctx, info, add)
	}
	if b.o.StreamMiB > 0 {
		add(b.benchExecStream(ctx, info))
	}
	// Against a daemon the bench did not start, the row needs its E2B
	// listeners named; without them it is left out, as a daemon without
	// a network leaves out the network rows, unless asked for by name.
	if b.o.E2BCreates > 0 && (b.o.E2B.API != "" || slices.Contains(b.o.Only, "e2b")) {
		add(b.benchE2B(ctx, info))
	} else if b.o.E2BCreates > 0 {
		b.logf("e2b row left out: no --e2b-api/--e2b-envd (the daemon's E2B listeners)")
	}
	if b.o.snapshotsWanted() {
		b.runSnapshotBenches(ctx, info, add)
	}
	if b.o.netWanted() {
		b.runNet(ctx, info, add)
	}
	if b.o.ProcFirstBytes > 0 {
		add(b.benchProcFirstByte(ctx, info))
	}
	if b.o.TreeFiles > 0 || b.o.WatchEvents > 0 {
		b.runTree(ctx, info, add)
	}
	if b.o.ImageImportMiB > 0 {
		add(b.benchImageImport(ctx))
	}
	if b.o.TemplateBuilds > 0 {
		for _, r := range b.benchTemplates(ctx) {
			add(r)
		}
	}
	if b.o.Pauses > 0 {
		for _, r := range b.benchPause(ctx, info) {
			add(r)
		}
	}
	if b.o.DensityMax > 0 {
		for _, r := range b.benchDensity(ctx, info) {
			add(r)
		}
	}
	switch {
	case b.o.RestartDead > 0 && b.o.Restarter != nil:
		for _, r := range b.benchRestart(ctx, info) {
			add(r)
		}
	case b.o.RestartDead > 0:
		b.logf("restart: skipped, it kills the daemon: only one the bench starts itself (--backend qemu) is restarted")
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
func (b *bencher) runWarm(ctx context.Context, info apitype.Info, add func(result)) {
	sb, err := b.createOne(ctx, info, apitype.CreateSandboxRequest{})
	if err != nil {
		err = fmt.Errorf("create the warm sandbox: %w", err)
		for _, r := range []result{{Name: "exec", Unit: unitMs}, {Name: "eval", Unit: unitMs}, {Name: "ping", Unit: unitMs},
			{Name: "upload", Unit: unitMBps}, {Name: "download", Unit: unitMBps}, {Name: "pty_echo", Unit: unitMs}} {
			r.Error = err.Error()
			add(r)
		}
		return
	}
	defer b.destroy(ctx, sb.ID)
	b.logf("warm sandbox %s", sb.ID)

	if b.o.Execs > 0 {
		r := b.benchExec(ctx, sb)
		if r.Error == "" && b.o.BaselineExecs > 0 {
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
	if b.o.Evals > 0 {
		add(b.benchEval(ctx, sb))
		add(b.benchPing(ctx, sb))
	}
	if b.o.FileMiB > 0 {
		up, down := b.benchTransfer(ctx, sb)
		add(up)
		add(down)
	}
	if b.o.PTYEchoes > 0 {
		add(b.benchPTY(ctx, sb))
	}
}

// createOne creates one sandbox of req for benchmarks of its own, living
// at most an hour; the caller destroys it.
func (b *bencher) createOne(ctx context.Context, info apitype.Info, req apitype.CreateSandboxRequest) (apitype.SandboxInfo, error) {
	req.N, req.TTLSecs = 1, ttlWithin(info, time.Hour)
	sbs, err := b.cl.CreateSandboxes(ctx, req)
	if err == nil && len(sbs) == 1 {
		return sbs[0], nil
	}
	for _, sb := range sbs {
		b.destroy(ctx, sb.ID)
	}
	if err == nil {
		err = fmt.Errorf("asked for 1 sandbox, got %d", len(sbs))
	}
	return apitype.SandboxInfo{}, err
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

// destroy deletes a sandbox even if ctx is canceled.
func (b *bencher) destroy(ctx context.Context, id string) { deleteSandbox(ctx, b.cl, id, b.logf) }

// deleteSandbox deletes sandbox id even if ctx is canceled (an
// interrupted bench must not leave sandboxes behind) and reports whether
// it is gone.
func deleteSandbox(ctx context.Context, cl *client.Client, id string, logf func(string, ...any)) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := cl.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
		logf("warning: delete sandbox %s: %v", id, err)
		return false
	}
	return true
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
