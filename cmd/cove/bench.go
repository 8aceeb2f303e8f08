package main

import (
	"net"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/internal/bench"
	"github.com/cove-sandbox/cove/pkg/client"
)

// newBenchCmd is cove bench: its flags, and the daemon it measures; the
// harness is internal/bench.
func newBenchCmd(cfg *clientConfig) *cobra.Command {
	o := bench.Defaults()
	var backend, accel, imageDir string
	var density bool
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure cove against its baselines, JSON out",
		Long: `Measure the running daemon (or, with --backend, a temporary daemon this
binary starts): create, exec, eval, file transfer, spawn, warm pool, branch
and snapshot chains, egress, preview URLs and DNS, each beside a baseline from
the same run. Run it as root on the daemon's host: the baselines run runsc and
read /proc, and the network rows start test servers in a network namespace of
their own (the DNS row only with --backend, whose daemon resolves through them).`,
		Example: "  cove bench --json\n  cove bench --density --json\n  cove bench --only exec,spawn --out bench.json\n  cove bench --backend qemu\n  cove bench --backend gvisor --only egress,preview,dns",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			given := map[string]bool{}
			cmd.Flags().Visit(func(f *pflag.Flag) { given[f.Name] = true })
			if density {
				// Alone: it fills the host.
				if !given["density-max"] {
					o.DensityMax = 1000
				}
				if !given["only"] {
					o.Only = bench.NameList{"density"}
				}
			}
			switch backend {
			case "", "gvisor":
			case "qemu":
				o.ForQEMU(given)
			default:
				return usageErrorf("--backend %q: want qemu or gvisor, or none for the running daemon", backend)
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			var cl *client.Client
			var daemon string
			if backend != "" {
				netArgs, err := o.StartNet(ctx)
				if err != nil {
					return err
				}
				defer o.CloseNet()
				// The temporary daemon serves the E2B facade too, for the
				// e2b row, unless the flags name one.
				if o.E2B.API == "" && o.E2B.Envd == "" {
					if o.E2B.API, err = freeLoopbackAddr(); err == nil {
						o.E2B.Envd, err = freeLoopbackAddr()
					}
					if err != nil {
						return err
					}
					netArgs = append(netArgs, "--e2b-api", o.E2B.API, "--e2b-envd", o.E2B.Envd)
				}
				d, err := bench.Start(ctx, bench.DaemonConfig{Backend: backend, Accel: accel, ImageDir: imageDir, Args: netArgs}, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				defer d.Stop(ctx)
				cl, daemon = client.New(d.URL, d.Key, client.WithUserAgent("cove-cli/"+version)), d.URL
				o.Restarter = d
				if backend == "gvisor" && !given["runsc-root"] {
					o.RunscRoot = d.RunscRoot()
				}
			} else {
				var err error
				if cl, daemon, err = cfg.client(); err != nil {
					return err
				}
			}
			return explain(bench.Run(ctx, cl, o, cmd.OutOrStdout(), cmd.ErrOrStderr()), daemon)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.Creates, "creates", o.Creates, "sequential single creates to time (each deleted after)")
	fs.IntVar(&o.Execs, "execs", o.Execs, "execs of `true` to time in one warm sandbox")
	fs.IntVar(&o.Evals, "evals", o.Evals, "evals of 1+1 to time")
	fs.IntVar(&o.BaselineExecs, "baseline-execs", o.BaselineExecs, "`runsc exec` calls to time as the exec baseline (gVisor only)")
	fs.IntVar(&o.FileMiB, "file-mib", o.FileMiB, "size of the file uploaded and downloaded, in MiB (0: skip)")
	fs.IntVar(&o.StreamMiB, "stream-mib", o.StreamMiB, "MiB of output timed through a streamed exec, beside a buffered exec of 16 MiB (0: skip)")
	fs.IntVar(&o.Spawns, "spawns", o.Spawns, "single spawns from a snapshot without a pool to time (each deleted after)")
	fs.IntVar(&o.PoolHandouts, "pool-handouts", o.PoolHandouts, "hand-outs from a warm pool to time, each after the pool refilled")
	fs.IntVar(&o.PoolSize, "pool-size", o.PoolSize, "size of the warm pool hand-outs come from")
	fs.IntVar(&o.SpawnN, "spawn-n", o.SpawnN, "children to spawn in one request, then measure the Pss of (0: skip)")
	fs.IntVar(&o.SpawnWith, "spawn-with", o.SpawnWith, "sandboxes held running while --spawn-n more are spawned again, beside the same spawn from empty; then all are killed, timed (0: skip)")
	fs.IntVar(&o.BranchLoad, "branch-load", o.BranchLoad, "busy sandboxes (a CPU each) running while the 50 MiB branch pause is timed again (0: skip)")
	fs.IntVar(&o.Branches, "branches", o.Branches, "branches to time per dirty size")
	fs.Var(&o.BranchMiB, "branch-mib", "MiB written in the source before each branch, comma-separated")
	fs.IntVar(&o.ChainDepth, "chain-depth", o.ChainDepth, "depth of the snapshot chain to spawn from")
	fs.IntVar(&o.ChainSamples, "chain-samples", o.ChainSamples, "spawns to time at each chain depth")
	fs.IntVar(&o.RestartDead, "restart-dead", o.RestartDead, "with --backend: sandboxes killed while the temporary daemon is down, before its restart is timed")
	fs.IntVar(&o.EgressMiB, "egress-mib", o.EgressMiB, "MiB downloaded from a test server, in a sandbox through cove's proxy and from the host (0: skip)")
	fs.IntVar(&o.PreviewGets, "preview-gets", o.PreviewGets, "requests to time through a preview URL, the connect tunnel and directly")
	fs.IntVar(&o.PTYEchoes, "pty-echoes", o.PTYEchoes, "keystrokes to time through a terminal, beside as many pings")
	fs.IntVar(&o.DNSLookups, "dns-lookups", o.DNSLookups, "in-sandbox lookups to time, of an allowed name and of one in /etc/hosts (with --backend)")
	fs.IntVar(&o.ProcFirstBytes, "proc-first-bytes", o.ProcFirstBytes, "background processes whose first output byte is timed to a follow client")
	fs.IntVar(&o.TreeFiles, "tree-files", o.TreeFiles, "files of 4 KiB uploaded as one tar stream, beside the same bytes as one file (0: skip)")
	fs.IntVar(&o.WatchEvents, "watch-events", o.WatchEvents, "watch events to time, from a touch through exec to the event (0: skip)")
	fs.IntVar(&o.ImageImportMiB, "image-import-mib", o.ImageImportMiB, "size in MiB of the generated OCI image whose import is timed, beside a re-import (0: skip)")
	fs.IntVar(&o.TemplateBuilds, "template-builds", o.TemplateBuilds, "Dockerfile templates to build cold, then again with every step cached (0: skip)")
	fs.IntVar(&o.E2BCreates, "e2b-creates", o.E2BCreates, "Sandbox.create + first commands.run to time through the published E2B SDK, beside the same through cove's API (needs --e2b-api and --e2b-envd unless --backend; 0: skip)")
	fs.StringVar(&o.E2B.API, "e2b-api", "", "the daemon's --e2b-api address (host:port) for the e2b row")
	fs.StringVar(&o.E2B.Envd, "e2b-envd", "", "the daemon's --e2b-envd address (host:port) for the e2b row")
	fs.StringVar(&o.E2B.SDK, "e2b-sdk", o.E2B.SDK, "the installed e2b npm package (make e2b-sdk)")
	fs.IntVar(&o.Pauses, "pauses", o.Pauses, "pauses, resumes, checkpoints and rollbacks of one sandbox to time, beside cold creates (0: skip)")
	fs.BoolVar(&density, "density", false, "measure density alone: idle sandboxes spawned in batches until the host's available memory would cross --density-floor-mib, each checked with an exec, their memory and idle CPU each, then killing them all")
	fs.IntVar(&o.DensityMax, "density-max", o.DensityMax, "most sandboxes the density benchmark holds (--density: 1000)")
	fs.Int64Var(&o.DensityOpts.FloorMiB, "density-floor-mib", o.DensityOpts.FloorMiB, "host memory (MemAvailable) the density benchmark never takes the host below")
	fs.IntVar(&o.DensityOpts.Batch, "density-batch", o.DensityOpts.Batch, "sandboxes per spawn call of the density benchmark")
	fs.DurationVar(&o.DensityOpts.Idle, "density-idle", o.DensityOpts.Idle, "how long the held sandboxes' idle CPU is measured over")
	fs.Var(&o.Only, "only", "run only these benchmarks, comma-separated, of: "+strings.Join(bench.Groups(), ", "))
	fs.Var(&o.Skip, "skip", "skip these benchmarks, comma-separated (names as for --only)")
	fs.StringVar(&o.Runsc, "runsc", o.Runsc, "the daemon's runsc, for the runsc exec baseline")
	fs.StringVar(&o.RunscRoot, "runsc-root", o.RunscRoot, "the daemon's runsc --root: sandboxes/.runsc in its --state-dir")
	fs.StringVar(&o.Out, "out", "", "also write the JSON result to this file")
	fs.BoolVar(&o.JSON, "json", false, "print JSON rather than a table")
	fs.StringVar(&backend, "backend", "", "empty: benchmark the running daemon; qemu or gvisor: start a temporary daemon (this binary) of that backend for the run")
	fs.StringVar(&accel, "accel", "tcg", "with --backend qemu: QEMU accelerator (tcg, kvm or auto)")
	fs.StringVar(&imageDir, "image-dir", "/var/lib/cove/images", "with --backend: where the daemon finds images (with VM artifacts for qemu)")
	return cmd
}

// freeLoopbackAddr is a loopback address with a port free now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
