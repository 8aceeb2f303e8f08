package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/cove-sandbox/cove/internal/bench"
	"github.com/cove-sandbox/cove/pkg/client"
)

// runBench is cove bench: its flags, and the daemon it measures.
func runBench(ctx context.Context, args []string) error {
	fs, c := newFlagSet("bench", "bench [flags]")
	o := bench.Defaults()
	fs.IntVar(&o.Creates, "creates", o.Creates, "sequential single creates to time (each deleted after)")
	fs.IntVar(&o.Execs, "execs", o.Execs, "execs of `true` to time in one warm sandbox")
	fs.IntVar(&o.Evals, "evals", o.Evals, "evals of 1+1 to time")
	fs.IntVar(&o.BaselineExecs, "baseline-execs", o.BaselineExecs, "`runsc exec` calls to time as the exec baseline (gVisor only)")
	fs.IntVar(&o.FileMiB, "file-mib", o.FileMiB, "size of the file uploaded and downloaded, in MiB (0: skip)")
	fs.IntVar(&o.Spawns, "spawns", o.Spawns, "single spawns from a snapshot without a pool to time (each deleted after)")
	fs.IntVar(&o.PoolHandouts, "pool-handouts", o.PoolHandouts, "hand-outs from a warm pool to time, each after the pool refilled")
	fs.IntVar(&o.PoolSize, "pool-size", o.PoolSize, "size of the warm pool hand-outs come from")
	fs.IntVar(&o.SpawnN, "spawn-n", o.SpawnN, "children to spawn in one request, then measure the Pss of (0: skip)")
	fs.IntVar(&o.Branches, "branches", o.Branches, "branches to time per dirty size")
	fs.Var(&o.BranchMiB, "branch-mib", "MiB written in the source before each branch, a comma-separated `list`")
	fs.IntVar(&o.ChainDepth, "chain-depth", o.ChainDepth, "depth of the snapshot chain to spawn from")
	fs.IntVar(&o.ChainSamples, "chain-samples", o.ChainSamples, "spawns to time at each chain depth")
	fs.Var(&o.Only, "only", "run only these benchmarks, a comma-separated `list` of: "+strings.Join(bench.Groups(), ", "))
	fs.Var(&o.Skip, "skip", "skip these benchmarks, a comma-separated `list` (names as for --only)")
	fs.StringVar(&o.Runsc, "runsc", o.Runsc, "the daemon's runsc, for the runsc exec baseline")
	fs.StringVar(&o.RunscRoot, "runsc-root", o.RunscRoot, "the daemon's runsc --root: sandboxes/.runsc in its --state-dir")
	fs.StringVar(&o.Out, "out", "", "also write the JSON result to this file")
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
	o.JSON = c.json
	switch *backend {
	case "":
	case "qemu":
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		o.ForQEMU(given)
	default:
		return fmt.Errorf("--backend %q: want qemu, or none for the running daemon", *backend)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	var cl *client.Client
	var daemon string
	if *backend == "qemu" {
		d, err := bench.StartQEMU(ctx, *accel, *imageDir, os.Stderr)
		if err != nil {
			return err
		}
		defer d.Stop(ctx)
		cl, daemon = client.New(d.URL, d.Key, client.WithUserAgent("cove-cli/"+version)), d.URL
	} else if cl, daemon, err = c.client(); err != nil {
		return err
	}
	return explain(bench.Run(ctx, cl, o, os.Stdout, os.Stderr), daemon)
}
