package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newInfoCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "info [flags]",
		Short:   "Show the daemon's backend, versions and limits",
		Example: "  cove info\n  cove info --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			info, err := cl.Info(cmd.Context())
			if err != nil {
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), info)
			}
			l := info.Limits
			backend := info.Backend
			if info.BackendReason != "" {
				backend += " (" + info.BackendReason + ")"
			}
			secs := func(s int64) string { return fmtDuration(time.Duration(s) * time.Second) }
			tw := newTable(cmd.OutOrStdout())
			row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
			row("daemon", "%s", daemon)
			row("version", "%s", info.Version)
			row("backend", "%s", backend)
			row("runtime", "%s", info.RuntimeVer)
			if info.Accel != "" {
				row("accel", "%s", info.Accel)
			}
			row("default image", "%s", info.DefaultImage)
			row("sandboxes", "%d of at most %d", info.Sandboxes, l.MaxSandboxes)
			row("ttl", "%s by default, at most %s", secs(l.DefaultTTLSecs), secs(l.MaxTTLSecs))
			row("cpus", "%d by default, at most %d", l.DefaultCPUs, l.MaxCPUs)
			row("memory", "%d MiB by default, at most %d MiB; all sandboxes together at most %d MiB", l.DefaultMemoryMiB, l.MaxMemoryMiB, l.MemoryBudgetMiB)
			row("disk", "%d MiB by default, at most %d MiB", l.DefaultDiskMiB, l.MaxDiskMiB)
			row("processes", "%d by default, at most %d", l.DefaultPids, l.MaxPids)
			row("open files", "%d per process", l.OpenFiles)
			row("per create", "at most %d sandboxes", l.MaxN)
			return tw.Flush()
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}
