package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func newLsCmd(cfg *clientConfig) *cobra.Command {
	var asJSON, ids bool
	labels := map[string]string{}
	cmd := &cobra.Command{
		Use:   "ls [flags]",
		Short: "List sandboxes",
		Long: `List the daemon's sandboxes, oldest first. It also forgets the sandbox
tokens of sandboxes that are gone.`,
		Example: `  cove ls
  cove ls --json
  cove ls --label team=web --label env=dev
  cove kill $(cove ls -q)`,
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			asOf := time.Now()
			sbs, err := cl.ListSandboxesLabeled(cmd.Context(), labels)
			if err != nil {
				return explain(err, daemon)
			}
			slices.SortFunc(sbs, func(a, b apitype.SandboxInfo) int {
				return cmp.Or(cmp.Compare(a.CreatedAtUnix, b.CreatedAtUnix), cmp.Compare(a.ID, b.ID))
			})

			// Sandboxes expire on their own; forget their tokens so the
			// store doesn't grow forever. Best effort: ls has done its job
			// regardless.
			live := make(map[string]bool, len(sbs))
			for _, sb := range sbs {
				live[sb.ID] = true
			}
			if st, err := defaultSandboxTokens(); err == nil && len(labels) == 0 { // a filtered list is not all
				st.prune(daemon, live, asOf)
			}

			return printList(cmd.OutOrStdout(), asJSON, ids, sbs, sandboxID, printLs)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, &ids, "print only the sandbox ids, one a line")
	addLabelFlag(cmd.Flags(), labels, "list only the sandboxes with this label")
	return cmd
}

// printLs writes ls's table.
func printLs(w io.Writer, sbs []apitype.SandboxInfo) error {
	now := time.Now()
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATUS\tIMAGE\tCPUS\tMEM\tAGE\tEXPIRES-IN\tLABELS")
	for _, sb := range sbs {
		age := "-"
		if sb.CreatedAtUnix != 0 {
			age = fmtDuration(now.Sub(time.Unix(sb.CreatedAtUnix, 0)))
		}
		status := sb.Status
		if sb.DeadReason != "" {
			status += " (" + sb.DeadReason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dMi\t%s\t%s\t%s\n",
			sb.ID, status, sandboxImage(sb), sb.CPUs, sb.MemoryMiB, age, fmtUntil(now, sb.ExpiresAtUnix), fmtLabels(sb.Labels))
	}
	return tw.Flush()
}
