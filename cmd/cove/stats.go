package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func newStatsCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [flags] ID",
		Short: "Show a sandbox's CPU, memory, disk and process figures",
		Long: `Show what a sandbox uses now, from its cgroup on the host: CPU seconds,
memory (current, peak, limit), bytes written to disk, saved state on disk
and host tasks. For QEMU these are the VM's.`,
		Example:           "  cove stats $ID\n  cove stats --json $ID",
		Args:              nArgs(1, 1, "give one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			m, err := cl.SandboxMetrics(cmd.Context(), args[0])
			if err != nil {
				return explain(noSuchSandbox(err, args[0]), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), m)
			}
			return printStats(cmd.OutOrStdout(), m)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// printStats writes m as a two-column table.
func printStats(w io.Writer, m apitype.SandboxMetrics) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	bytes := func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }
	fmt.Fprintf(tw, "id\t%s\nstatus\t%s (%s)\n", m.ID, m.Status, m.Backend)
	if !m.Cgroup {
		fmt.Fprintf(tw, "usage\tnone: the sandbox is not running\n")
	} else {
		fmt.Fprintf(tw, "cpu\t%.2f s\n", m.CPUSeconds)
		fmt.Fprintf(tw, "memory\t%s (peak %s, limit %s)\n", bytes(m.MemoryBytes), bytes(m.MemoryPeakBytes), bytes(m.MemoryLimitBytes))
		fmt.Fprintf(tw, "disk written\t%s\n", bytes(m.DiskWrittenBytes))
		fmt.Fprintf(tw, "tasks\t%d\n", m.Pids)
	}
	fmt.Fprintf(tw, "saved state\t%s\n", bytes(m.DiskBytes))
	return tw.Flush()
}
