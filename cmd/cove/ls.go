package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func runLs(ctx context.Context, args []string) error {
	fs, c := newFlagSet("ls", "ls [flags]")
	quiet := fs.Bool("q", false, "print only the sandbox ids, one a line")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments %q; see cove ls -h", pos)
	}
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	asOf := time.Now()
	sbs, err := cl.ListSandboxes(ctx)
	if err != nil {
		return explain(err, daemon)
	}
	slices.SortFunc(sbs, func(a, b apitype.SandboxInfo) int {
		return cmp.Or(cmp.Compare(a.CreatedAtUnix, b.CreatedAtUnix), cmp.Compare(a.ID, b.ID))
	})

	// Sandboxes expire on their own; forget their tokens so the store
	// doesn't grow forever. Best effort: ls has done its job regardless.
	live := make(map[string]bool, len(sbs))
	for _, sb := range sbs {
		live[sb.ID] = true
	}
	if st, err := defaultTokenStore(); err == nil {
		st.prune(daemon, live, asOf)
	}

	switch {
	case c.json:
		if sbs == nil {
			sbs = []apitype.SandboxInfo{} // [] rather than null
		}
		return printJSON(os.Stdout, sbs)
	case *quiet:
		for _, sb := range sbs {
			fmt.Println(sb.ID)
		}
		return nil
	}
	now := time.Now()
	tw := newTable(os.Stdout)
	fmt.Fprintln(tw, "ID\tSTATUS\tIMAGE\tCPUS\tMEM\tAGE\tEXPIRES-IN")
	for _, sb := range sbs {
		age := "-"
		if sb.CreatedAtUnix != 0 {
			age = fmtDuration(now.Sub(time.Unix(sb.CreatedAtUnix, 0)))
		}
		image := sb.Image
		if sb.SnapshotTag != "" {
			image += "@" + sb.SnapshotTag
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dMi\t%s\t%s\n",
			sb.ID, sb.Status, image, sb.CPUs, sb.MemoryMiB, age, fmtUntil(now, sb.ExpiresAtUnix))
	}
	return tw.Flush()
}
