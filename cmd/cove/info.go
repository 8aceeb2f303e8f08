package main

import (
	"cmp"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func newInfoCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info [flags] [ID]",
		Short: "Show the daemon's backend, versions and limits, or one sandbox",
		Long: `Show the daemon's backend, versions, limits and network, or with ID,
that sandbox: its size, expiry, network policy and exposed ports.`,
		Example:           "  cove info\n  cove info --json\n  cove info $ID",
		Args:              nArgs(0, 1, "give at most one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(args) == 1 {
				sb, err := cl.GetSandbox(cmd.Context(), args[0])
				if err != nil {
					return explain(noSuchSandbox(err, args[0]), daemon)
				}
				if asJSON {
					return printJSON(w, sb)
				}
				return printSandbox(w, sb)
			}
			info, err := cl.Info(cmd.Context())
			if err != nil {
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(w, info)
			}
			return printInfo(w, daemon, info)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// printInfo writes the daemon's description.
func printInfo(w io.Writer, daemon string, info apitype.Info) error {
	l := info.Limits
	backend := info.Backend
	if info.BackendReason != "" {
		backend += " (" + info.BackendReason + ")"
	}
	secs := func(s int64) string { return fmtDuration(time.Duration(s) * time.Second) }
	tw := newTable(w)
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
	n := info.Network
	if !n.Enabled {
		row("network", "none: sandboxes have no network")
		return tw.Flush()
	}
	row("network", "egress denied unless a sandbox's policy allows it (cove net)")
	row("presets", "%s", dash(strings.Join(n.Presets, ", ")))
	if n.PreviewDomain != "" {
		port := ""
		if u, err := url.Parse(daemon); err == nil && u.Port() != "" {
			port = ":" + u.Port()
		}
		row("previews", "http://PORT-ID.%s%s (cove expose)", n.PreviewDomain, port)
		if n.PreviewHTTPSPort != 0 {
			row("", "https://PORT-ID.%s:%d", n.PreviewDomain, n.PreviewHTTPSPort)
		}
		if n.PreviewCA != "" {
			row("preview CA", "%s (trust it for the https URLs)", n.PreviewCA)
		}
	}
	return tw.Flush()
}

// printSandbox writes one sandbox's description.
func printSandbox(w io.Writer, sb apitype.SandboxInfo) error {
	now := time.Now()
	tw := newTable(w)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
	status := sb.Status
	if sb.DeadReason != "" {
		status += " (" + sb.DeadReason + ")"
	}
	row("id", "%s", sb.ID)
	row("status", "%s", status)
	row("backend", "%s", sb.Backend)
	row("image", "%s", sandboxImage(sb))
	row("size", "%d CPUs, %d MiB memory, %d MiB disk, %d processes", sb.CPUs, sb.MemoryMiB, sb.DiskMiB, sb.Pids)
	if sb.Status == apitype.StatusPaused { // its lifetime stands still
		row("paused", "%s on disk, %s of its lifetime left for its resume", humanize.IBytes(uint64(sb.PausedBytes)),
			time.Duration(sb.RemainingTTLSecs)*time.Second)
	} else {
		row("expires in", "%s", fmtUntil(now, sb.ExpiresAtUnix))
	}
	if sb.CheckpointBytes > 0 {
		row("checkpoints", "%s on disk (cove checkpoints)", humanize.IBytes(uint64(sb.CheckpointBytes)))
	}
	row("labels", "%s", fmtLabels(sb.Labels))
	row("user", "%s", cmp.Or(sb.User, "root"))
	policyRows(tw, sb.Network)
	if len(sb.Ports) == 0 {
		row("ports", "none exposed (cove expose)")
		return tw.Flush()
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return printPorts(w, sb.Ports)
}
