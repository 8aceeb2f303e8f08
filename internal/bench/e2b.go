package bench

// The E2B row: Sandbox.create and the first commands.run through the
// published E2B SDK against the daemon's E2B facade, beside the same two
// calls through cove's own API in the same run.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

//go:embed e2b.mjs
var e2bScript []byte

// E2BOptions point the E2B row at the daemon's facade.
type E2BOptions struct {
	API, Envd string // the daemon's --e2b-api and --e2b-envd addresses (host:port)
	// SDK is the installed e2b package's directory (make e2b-sdk:
	// /var/cache/cove/e2b-sdk/2.51.0/node_modules/e2b).
	SDK string
}

func (b *bencher) benchE2B(ctx context.Context, info apitype.Info) result {
	const name = "e2b_sdk_create_run"
	o := b.o.E2B
	if o.API == "" || o.Envd == "" {
		return failedResult(name, unitMs, errors.New("--e2b-api and --e2b-envd (the daemon's E2B listeners) are needed, or skip it with --skip e2b"))
	}
	module := filepath.Join(o.SDK, "dist", "index.mjs")
	if _, err := os.Stat(module); err != nil {
		return failedResult(name, unitMs, fmt.Errorf("E2B SDK: %w (make e2b-sdk)", err))
	}
	dir, err := os.MkdirTemp("", "cove-bench-e2b-")
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "e2b.mjs")
	if err := os.WriteFile(script, e2bScript, 0o600); err != nil {
		return failedResult(name, unitMs, err)
	}
	cmd := exec.CommandContext(ctx, "node", script, module, fmt.Sprint(b.o.E2BCreates))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"E2B_API_URL=http://" + o.API, "E2B_SANDBOX_URL=http://" + o.Envd, "E2B_API_KEY=e2b_" + b.cl.APIKey()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return failedResult(name, unitMs, fmt.Errorf("node: %w: %s", err, strings.TrimSpace(stderr.String())))
	}
	var out struct{ MS []float64 }
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil || len(out.MS) == 0 {
		return failedResult(name, unitMs, fmt.Errorf("node printed %q: %v", stdout.String(), err))
	}
	r := msResult(name, out.MS)
	// The same through cove's API: a create and its first exec, as the
	// facade makes them (the SDK's default user).
	once := func() (time.Duration, error) {
		t0 := time.Now()
		sbs, err := b.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{User: "user"})
		if err != nil {
			return 0, err
		}
		defer b.cl.DeleteSandbox(context.WithoutCancel(ctx), sbs[0].ID)
		if _, err := b.cl.Exec(ctx, sbs[0].ID, sbs[0].Token, apitype.ExecRequest{Cmd: []string{"true"}}); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	if lat, err := b.sample(name, 0, b.o.E2BCreates, once); err == nil {
		c := latencyResult(name, lat)
		r.Baseline = &baseline{Name: "cove API: create + first exec", P50: c.P50, P99: c.P99, N: c.N}
	} else {
		b.logf("no cove API baseline for %s: %v", name, err)
	}
	return r
}
