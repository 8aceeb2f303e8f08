package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const snapshotUsageText = `usage: cove snapshot build TAG [--image I] [--warm CMD] [--cpus N] [--memory-mib M] [--pool-size N]
       cove snapshot save ID TAG
       cove snapshot ls [-q]
       cove snapshot rm TAG...

Snapshots are templates that sandboxes start from in milliseconds:
cove spawn TAG starts sandboxes from one, cove branch ID makes one from
a running sandbox.
`

// runSnapshot builds, saves, lists and removes snapshots.
func runSnapshot(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, snapshotUsageText)
		return flag.ErrHelp
	}
	switch args[0] {
	case "build":
		return runSnapshotBuild(ctx, args[1:])
	case "save":
		return runSnapshotSave(ctx, args[1:])
	case "ls", "list":
		return runSnapshotLs(ctx, args[1:])
	case "rm":
		return runSnapshotRm(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stderr, snapshotUsageText)
		return flag.ErrHelp
	}
	fmt.Fprintf(os.Stderr, "cove snapshot: unknown subcommand %q\n%s", args[0], snapshotUsageText)
	return exitError{2}
}

func runSnapshotBuild(ctx context.Context, args []string) error {
	fs, c := newFlagSet("snapshot build", "snapshot build [flags] TAG")
	image := fs.String("image", "", "guest image (default: the daemon's)")
	warm := fs.String("warm", "", "shell command run before the checkpoint (default: the daemon's, importing common Python modules)")
	cpus := fs.Int("cpus", 0, "CPUs of sandboxes spawned from it (default: the daemon's)")
	mem := fs.Int("memory-mib", 0, "memory of sandboxes spawned from it, in MiB (default: the daemon's)")
	pool := fs.Int("pool-size", -1, "sandboxes kept restored and ready to hand out (default: the daemon's)")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("give one snapshot TAG")
	}
	req := apitype.CreateSnapshotRequest{Tag: pos[0], Image: *image, Warm: *warm, CPUs: *cpus, MemoryMiB: *mem}
	if *pool >= 0 {
		req.PoolSize = pool
	}
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	if isTerminal(os.Stderr) {
		fmt.Fprintf(os.Stderr, "building snapshot %s: booting a sandbox, warming it and checkpointing; this can take a minute...\n", req.Tag)
	}
	t0 := time.Now()
	si, err := cl.CreateSnapshot(ctx, req)
	if err != nil {
		if errors.Is(err, client.ErrConflict) {
			err = fmt.Errorf("%w\n  hint: a snapshot %s exists; `cove snapshot rm %s` first, or pick another tag", err, req.Tag, req.Tag)
		}
		return explain(err, daemon)
	}
	if c.json {
		return printJSON(os.Stdout, si)
	}
	fmt.Fprintf(os.Stderr, "built in %s\n", time.Since(t0).Round(100*time.Millisecond))
	return printSnapshots(os.Stdout, []apitype.SnapshotInfo{si})
}

func runSnapshotSave(ctx context.Context, args []string) error {
	fs, c := newFlagSet("snapshot save", "snapshot save [flags] ID TAG")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("give a sandbox ID and a snapshot TAG")
	}
	id, tag := pos[0], pos[1]
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	br, err := cl.SnapshotSandbox(ctx, id, apitype.BranchRequest{Tag: tag})
	if err != nil {
		return explain(noSuchSandbox(err, id), daemon)
	}
	if c.json {
		return printJSON(os.Stdout, br)
	}
	fmt.Fprintf(os.Stderr, "sandbox %s was paused %.1f ms\n", id, br.PauseMs)
	return printSnapshots(os.Stdout, []apitype.SnapshotInfo{br.SnapshotInfo})
}

func runSnapshotLs(ctx context.Context, args []string) error {
	fs, c := newFlagSet("snapshot ls", "snapshot ls [flags]")
	quiet := fs.Bool("q", false, "print only the tags, one a line")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments %q; see cove snapshot ls -h", pos)
	}
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	sis, err := cl.ListSnapshots(ctx)
	if err != nil {
		return explain(err, daemon)
	}
	slices.SortFunc(sis, func(a, b apitype.SnapshotInfo) int {
		return cmp.Or(cmp.Compare(a.CreatedAtUnix, b.CreatedAtUnix), cmp.Compare(a.Tag, b.Tag))
	})
	switch {
	case c.json:
		if sis == nil {
			sis = []apitype.SnapshotInfo{} // [] rather than null
		}
		return printJSON(os.Stdout, sis)
	case *quiet:
		for _, si := range sis {
			fmt.Println(si.Tag)
		}
		return nil
	}
	return printSnapshots(os.Stdout, sis)
}

// printSnapshots writes a table of snapshots.
func printSnapshots(w io.Writer, sis []apitype.SnapshotInfo) error {
	now := time.Now()
	tw := newTable(w)
	fmt.Fprintln(tw, "TAG\tFROM\tDEPTH\tIMAGE\tCPUS\tMEM\tSIZE\tPOOL\tCHILDREN\tAGE")
	for _, si := range sis {
		from := "-"
		if si.BranchedFrom != "" {
			from = si.BranchedFrom
			if si.Parent != "" {
				from += "@" + si.Parent
			}
		}
		age := "-"
		if si.CreatedAtUnix != 0 {
			age = fmtDuration(now.Sub(time.Unix(si.CreatedAtUnix, 0)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%dMi\t%s\t%d/%d\t%d\t%s\n",
			si.Tag, from, si.Depth, si.Image, si.CPUs, si.MemoryMiB, fmtBytes(si.SizeBytes),
			si.PoolReady, si.PoolSize, si.Children, age)
	}
	return tw.Flush()
}

// snapshotRmResult is the outcome for one tag, as --json prints it.
type snapshotRmResult struct {
	Tag     string `json:"tag"`
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}

func runSnapshotRm(ctx context.Context, args []string) error {
	fs, c := newFlagSet("snapshot rm", "snapshot rm [flags] TAG...")
	tags, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(tags) == 0 {
		fs.Usage()
		return errors.New("give snapshot TAGs")
	}
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	// One at a time, in the order given, so that `rm CHILD PARENT` works.
	results := make([]snapshotRmResult, 0, len(tags))
	failed := 0
	for _, tag := range tags {
		r := snapshotRmResult{Tag: tag}
		if err := cl.DeleteSnapshot(ctx, tag); err != nil {
			r.Error = explain(snapshotHint(err, tag), daemon).Error()
			failed++
		} else {
			r.Removed = true
		}
		results = append(results, r)
	}
	if c.json {
		if err := printJSON(os.Stdout, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Removed {
				fmt.Printf("removed %s\n", r.Tag)
			} else {
				fmt.Fprintf(os.Stderr, "cove snapshot rm: %s\n", r.Error)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d snapshots not removed", failed, len(results))
	}
	return nil
}

// snapshotHint adds what to do next to a not-found or conflict error
// about snapshot tag.
func snapshotHint(err error, tag string) error {
	switch {
	case errors.Is(err, client.ErrNotFound):
		return fmt.Errorf("%w\n  hint: `cove snapshot ls` lists the snapshots", err)
	case errors.Is(err, client.ErrConflict):
		return fmt.Errorf("%w\n  hint: `cove ls` shows the sandboxes spawned from it as IMAGE@%s; kill them, or remove the snapshots branched from them, first", err, tag)
	}
	return err
}
