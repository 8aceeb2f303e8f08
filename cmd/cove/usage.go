package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newUsageCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	var q client.UsageQuery
	cmd := &cobra.Command{
		Use:   "usage [flags]",
		Short: "Show your tenant's metered usage and what is left of its quota",
		Long: `Show what the calling key's tenant used over a range: sandbox-seconds,
vCPU-seconds, GiB-seconds (memory), bytes in and out over the sandboxes'
network links and execs, in total, by template and by sandbox, with the
tenant's quota, what it holds now and what remains. Time counts while a
sandbox runs, not while it is paused. The range defaults to the current UTC
month up to now; --from and --to take RFC 3339 or unix seconds.`,
		Example: "  cove usage\n  cove usage --from 2026-03-01T00:00:00Z --to 2026-04-01T00:00:00Z\n  cove usage --json",
		Args:    nArgs(0, 0, "usage takes no arguments: give the range with --from and --to"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			u, err := cl.Usage(cmd.Context(), q)
			if err != nil {
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), u)
			}
			return printUsage(cmd.OutOrStdout(), u)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&q.From, "from", "", "start of the range, RFC 3339 or unix seconds (default: the start of this UTC month)")
	fs.StringVar(&q.To, "to", "", "end of the range, RFC 3339 or unix seconds (default: now)")
	fs.StringVar(&q.Tenant, "tenant", "", "another tenant's usage (an admin key only)")
	addOutputFlags(fs, &asJSON, nil, "")
	return cmd
}

// printUsage writes u as a summary, then a table by template and one by
// sandbox, then the quota.
func printUsage(w io.Writer, u apitype.Usage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tenant\t%s\nrange\t%s to %s\n\n", u.Tenant, u.From.UTC().Format(time.RFC3339), u.To.UTC().Format(time.RFC3339))
	fmt.Fprintln(tw, "TEMPLATE\tSANDBOX\tSANDBOX-S\tVCPU-S\tGIB-S\tIN\tOUT\tEXECS")
	row := func(tmpl, id string, f apitype.UsageFigures) {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%d\n", tmpl, id, f.SandboxSeconds, f.VCPUSeconds, f.GiBSeconds,
			humanize.IBytes(uint64(max(f.BytesIn, 0))), humanize.IBytes(uint64(max(f.BytesOut, 0))), f.Execs)
	}
	for _, t := range u.ByTemplate {
		row(t.Template, "*", t.UsageFigures)
	}
	for _, s := range u.BySandbox {
		id := s.SandboxID
		if s.Running {
			id += " (running)"
		}
		row(s.Template, id, s.UsageFigures)
	}
	row("total", "", u.Totals)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "QUOTA\tLIMIT\tIN USE\tREMAINING")
	limit := func(v int64) string {
		if v == 0 {
			return "unlimited"
		}
		return strconv.FormatInt(v, 10)
	}
	left := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatInt(*p, 10)
	}
	asInt64 := func(p *int) *int64 {
		if p == nil {
			return nil
		}
		v := int64(*p)
		return &v
	}
	q, in, r := u.Quota, u.InUse, u.Remaining
	fmt.Fprintf(tw, "sandboxes\t%s\t%d\t%s\n", limit(int64(q.MaxSandboxes)), in.Sandboxes, left(asInt64(r.Sandboxes)))
	fmt.Fprintf(tw, "vcpus\t%s\t%d\t%s\n", limit(int64(q.MaxVCPUs)), in.VCPUs, left(asInt64(r.VCPUs)))
	fmt.Fprintf(tw, "memory_mib\t%s\t%d\t%s\n", limit(q.MaxMemoryMiB), in.MemoryMiB, left(r.MemoryMiB))
	fmt.Fprintf(tw, "disk_mib\t%s\t%s\t%s\n", limit(q.MaxDiskMiB), left(in.DiskMiB), left(r.DiskMiB))
	return tw.Flush()
}
