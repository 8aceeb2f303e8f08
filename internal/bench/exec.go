package bench

// The latency benchmarks: create, exec and eval, and exec's baseline,
// runsc exec in the same sandbox.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func (b *bencher) benchCreate(ctx context.Context, info apitype.Info) result {
	lat := make([]time.Duration, 0, b.o.Creates)
	for i := range b.o.Creates {
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
		b.logf("create %d/%d: %s", i+1, b.o.Creates, fmtMs(d))
	}
	return latencyResult("create", lat)
}

func (b *bencher) benchExec(ctx context.Context, sb apitype.SandboxInfo) result {
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
	lat, err := b.sample("exec", 3, b.o.Execs, once)
	if err != nil {
		return failedResult("exec", unitMs, err)
	}
	return latencyResult("exec", lat)
}

func (b *bencher) benchEval(ctx context.Context, sb apitype.SandboxInfo) result {
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
	lat, err := b.sample("eval", 1, b.o.Evals, once)
	if err != nil {
		return failedResult("eval", unitMs, err)
	}
	return latencyResult("eval", lat)
}

// benchPing times the agent's round trip through the API (as many as
// evals): what every call costs before it does anything.
func (b *bencher) benchPing(ctx context.Context, sb apitype.SandboxInfo) result {
	lat, err := b.sample("ping", 3, b.o.Evals, func() (time.Duration, error) {
		t0 := time.Now()
		_, err := b.cl.Ping(ctx, sb.ID, sb.Token)
		return time.Since(t0), err
	})
	if err != nil {
		return failedResult("ping", unitMs, err)
	}
	return latencyResult("ping", lat)
}

// runscBaseline times `runsc exec ID true` in the warm sandbox: what an
// exec costs without cove's agent. It returns nil, nil when the backend
// has no runsc to compare with.
func (b *bencher) runscBaseline(ctx context.Context, info apitype.Info, id string) (*baseline, error) {
	if info.Backend != "gvisor" || b.o.Runsc == "" || b.o.RunscRoot == "" {
		b.logf("no runsc baseline: backend %q, runsc %q, runsc root %q", info.Backend, b.o.Runsc, b.o.RunscRoot)
		return nil, nil
	}
	once := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// The runsc container id is the sandbox id.
		cmd := exec.CommandContext(ctx, b.o.Runsc, "--root", b.o.RunscRoot, "exec", id, "true")
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
			return d, fmt.Errorf("%s: %w: %s (runsc needs the daemon's privileges and its --root: run cove bench as root, with --runsc-root if the daemon's --state-dir is not the default)", cmd, err, msg)
		}
		return d, nil
	}
	lat, err := b.sample("runsc exec", 1, b.o.BaselineExecs, once)
	if err != nil {
		return nil, err
	}
	r := latencyResult("runsc exec", lat)
	return &baseline{Name: r.Name, P50: r.P50, P99: r.P99, N: r.N}, nil
}
