package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newSnapshotCmd(cfg *clientConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Build, save, list and remove snapshots",
		Long: `Snapshots are templates that sandboxes start from in milliseconds:
cove spawn TAG starts sandboxes from one, cove branch ID makes one from a
running sandbox.`,
		Example: `  cove snapshot build py --warm 'pip install numpy'
  cove snapshot save $ID mytag
  cove snapshot ls
  cove snapshot rm py`,
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(newSnapshotBuildCmd(cfg), newSnapshotSaveCmd(cfg), newSnapshotLsCmd(cfg), newSnapshotRmCmd(cfg))
	return cmd
}

func newSnapshotBuildCmd(cfg *clientConfig) *cobra.Command {
	var (
		req    apitype.CreateSnapshotRequest
		pool   int
		asJSON bool
		pf     policyFlags
	)
	cmd := &cobra.Command{
		Use:   "build [flags] TAG",
		Short: "Build a snapshot: boot a sandbox, warm it, checkpoint it",
		Long: `Build snapshot TAG: boot a sandbox from the image, run the --warm command
in it (its output shows on stderr as it runs), warm the Python interpreter,
and checkpoint it all. The policy flags open the network while it warms,
and its children start with the same policy.`,
		Example: `  cove snapshot build py --preset pypi --warm 'pip install numpy pandas'
  cove snapshot build py --allow-domain pypi.org --allow-domain files.pythonhosted.org --warm 'pip install numpy'
  cove snapshot build big --cpus 4 --memory-mib 4096 --pool-size 0`,
		Args:              nArgs(1, 1, "give one snapshot TAG"),
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Tag, req.Network = args[0], pf.policy()
			if pool >= 0 {
				req.PoolSize = &pool
			}
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			if isTerminal(stderr) {
				fmt.Fprintf(stderr, "building snapshot %s: booting a sandbox, warming it and checkpointing; this can take a minute...\n", req.Tag)
			}
			t0 := time.Now()
			si, err := cl.BuildSnapshot(cmd.Context(), req, stderr)
			if err != nil {
				if errors.Is(err, client.ErrConflict) {
					err = fmt.Errorf("%w\n  hint: a snapshot %s exists; `cove snapshot rm %s` first, or pick another tag", err, req.Tag, req.Tag)
				}
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), si)
			}
			fmt.Fprintf(stderr, "built in %s\n", time.Since(t0).Round(100*time.Millisecond))
			return printSnapshots(cmd.OutOrStdout(), []apitype.SnapshotInfo{si})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Image, "image", "", "guest image (default: the daemon's)")
	fs.StringVar(&req.Warm, "warm", "", "shell command run before the checkpoint (default: the daemon's, importing common Python modules)")
	fs.IntVar(&req.CPUs, "cpus", 0, "CPUs of sandboxes spawned from it (default: the daemon's)")
	fs.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory of sandboxes spawned from it, in MiB (default: the daemon's)")
	fs.IntVar(&req.DiskMiB, "disk-mib", 0, "disk space sandboxes spawned from it may write, in MiB (default: the daemon's)")
	fs.IntVar(&req.Pids, "pids", 0, "processes and threads of sandboxes spawned from it (default: the daemon's)")
	fs.IntVar(&pool, "pool-size", -1, "sandboxes kept restored and ready to hand out (default: the daemon's)")
	addOutputFlags(fs, &asJSON, nil, "")
	addPolicyFlags(cmd, cfg, &pf, "egress while it warms, and of its children")
	return cmd
}

func newSnapshotSaveCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:               "save [flags] ID TAG",
		Short:             "Save a running sandbox as snapshot TAG, without children",
		Example:           `  cove snapshot save $ID configured`,
		Args:              nArgs(2, 2, "give a sandbox ID and a snapshot TAG"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, tag := args[0], args[1]
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			br, err := cl.SnapshotSandbox(cmd.Context(), id, tok, apitype.BranchRequest{Tag: tag})
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			rememberSnapshotToken(cmd.ErrOrStderr(), "snapshot save", daemon, br.Tag, tok)
			if asJSON {
				return printJSON(cmd.OutOrStdout(), br)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sandbox %s was paused %.1f ms\n", id, br.PauseMs)
			return printSnapshots(cmd.OutOrStdout(), []apitype.SnapshotInfo{br.SnapshotInfo})
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

func newSnapshotLsCmd(cfg *clientConfig) *cobra.Command {
	var asJSON, tags bool
	cmd := &cobra.Command{
		Use:               "ls [flags]",
		Aliases:           []string{"list"},
		Short:             "List snapshots, oldest first",
		Example:           "  cove snapshot ls\n  cove snapshot ls -q",
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			sis, err := cl.ListSnapshots(cmd.Context())
			if err != nil {
				return explain(err, daemon)
			}
			slices.SortFunc(sis, func(a, b apitype.SnapshotInfo) int {
				return cmp.Or(cmp.Compare(a.CreatedAtUnix, b.CreatedAtUnix), cmp.Compare(a.Tag, b.Tag))
			})
			tag := func(si apitype.SnapshotInfo) string { return si.Tag }
			return printList(cmd.OutOrStdout(), asJSON, tags, sis, tag, printSnapshots)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, &tags, "print only the tags, one a line")
	return cmd
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
			si.Tag, from, si.Depth, si.Image, si.CPUs, si.MemoryMiB, humanize.IBytes(uint64(si.SizeBytes)),
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

func newSnapshotRmCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rm [flags] TAG...",
		Short: "Remove snapshots, one at a time in the order given",
		Long: `Remove snapshots, one at a time in the order given, so that
cove snapshot rm CHILD PARENT works. A snapshot with sandboxes or
snapshots made from it alive stays.`,
		Example:           "  cove snapshot rm py\n  cove snapshot rm $(cove snapshot ls -q)",
		Args:              nArgs(1, -1, "give snapshot TAGs"),
		ValidArgsFunction: completeEach(cfg.snapshotTags),
		RunE: func(cmd *cobra.Command, tags []string) error {
			return snapshotRm(cmd, cfg, tags, asJSON)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// snapshotRm removes snapshots tags.
func snapshotRm(cmd *cobra.Command, cfg *clientConfig, tags []string, asJSON bool) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	cl, daemon, err := cfg.client()
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
			if st, err := defaultSandboxTokens(); err == nil {
				st.removeSnapshots(daemon, tag)
			}
		}
		results = append(results, r)
	}
	if asJSON {
		if err := printJSON(stdout, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Removed {
				fmt.Fprintf(stdout, "removed %s\n", r.Tag)
			} else {
				fmt.Fprintf(stderr, "cove snapshot rm: %s\n", r.Error)
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
	case errors.Is(err, client.ErrForbidden):
		return fmt.Errorf("%w\n  hint: snapshot %s was saved from a sandbox, and spawning from it takes that sandbox's token: "+
			"`cove branch` and `cove snapshot save` remember it for you; else pass it with --sandbox-token or COVE_SANDBOX_TOKEN", err, tag)
	}
	return err
}
