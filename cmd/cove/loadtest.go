package main

import (
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/loadtest"
)

// newLoadtestCmd is cove loadtest: its flags; the engine is
// internal/loadtest.
func newLoadtestCmd(cfg *clientConfig) *cobra.Command {
	o := loadtest.Defaults()
	cmd := &cobra.Command{
		Use:   "loadtest [flags]",
		Short: "Drive the daemon with many concurrent clients and report throughput, latencies and errors",
		Long: `Drive the daemon with concurrent clients, each running a weighted mix of
create, spawn (from --snapshot), exec, files (a put, then a get compared),
branch (one child) and kill on sandboxes of its own, until --ops ops or
--duration pass, whichever comes first (the first client runs every op of
the mix once before it draws at random, so a short run covers it). Then every sandbox and snapshot it
made is deleted (also on ^C), and it prints ops/s and p50/p90/p99 by
operation, errors by code, and the daemon's RSS and open files before and
after when the daemon runs on this host. Only a daemon on a loopback address
is driven. It exits non-zero if any op failed or anything was left behind.`,
		Example: "  cove loadtest -c 50 -d 60s\n  cove loadtest -n 200 --mix exec=5,files=2,spawn=1,kill=1 --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			daemon := cfg.baseURL()
			if err := loadtest.CheckLoopback(daemon); err != nil {
				return usageError{err}
			}
			key, err := cfg.key()
			if err != nil {
				return err
			}
			_, err = loadtest.Run(cmd.Context(), daemon, key, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return explain(err, daemon)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&o.Clients, "clients", "c", o.Clients, "concurrent clients")
	fs.IntVarP(&o.Ops, "ops", "n", o.Ops, "ops to run in all (0: until --duration)")
	fs.DurationVarP(&o.Duration, "duration", "d", o.Duration, "how long to start ops (0: until --ops)")
	fs.Var(o.Mix, "mix", "weights of the ops, op=weight comma-separated, of: create, spawn, exec, files, branch, kill")
	fs.StringVar(&o.Snapshot, "snapshot", o.Snapshot, "snapshot spawn restores from")
	fs.IntVar(&o.PerClient, "per-client", o.PerClient, "sandboxes one client holds at most")
	fs.IntVar(&o.MaxSandboxes, "max-sandboxes", 0, "sandboxes of the run alive at once, all clients together (0: clients x per-client, within 3/4 of the daemon's limits)")
	fs.IntVar(&o.FileBytes, "file-bytes", o.FileBytes, "size of the file each files op puts and gets")
	fs.IntVar(&o.DaemonPID, "daemon-pid", 0, "the daemon's pid, for its RSS and open files (0: the process listening on the URL's port, if this user can see it)")
	fs.BoolVar(&o.JSON, "json", false, "print JSON rather than tables")
	return cmd
}
