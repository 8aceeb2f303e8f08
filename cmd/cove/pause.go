package main

import (
	"fmt"
	"io"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// The verbs of pause and resume, checkpoint and rollback (pause.go in the
// service): a sandbox's state saved to disk and restored under its own id.

func newPauseCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pause [flags] ID",
		Short: "Save a sandbox to disk and free its memory and processes",
		Long: `Pause a running sandbox: its memory, processes and files are saved to
the daemon's disk and everything it held on the host is freed. Its lifetime
stands still until cove resume, which restores it under the same id and
token. Calls to it meanwhile fail, unless it was created with --auto-resume.`,
		Example:           "  cove pause $ID\n  cove resume $ID",
		Args:              nArgs(1, 1, "give one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			sb, err := cl.PauseSandbox(cmd.Context(), args[0])
			if err != nil {
				return explain(noSuchSandbox(err, args[0]), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s paused: %s on disk, %s of its lifetime left\n", sb.ID,
				humanize.IBytes(uint64(sb.PausedBytes)), time.Duration(sb.RemainingTTLSecs)*time.Second)
			return nil
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

func newResumeCmd(cfg *clientConfig) *cobra.Command {
	var (
		asJSON bool
		ttl    time.Duration
	)
	cmd := &cobra.Command{
		Use:               "resume [flags] ID",
		Short:             "Restore a paused sandbox under its own id and token",
		Long:              "Resume a paused sandbox, with the lifetime it had left (or --ttl from now).",
		Example:           "  cove resume $ID\n  cove resume --ttl 1h $ID",
		Args:              nArgs(1, 1, "give one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNTTL(1, 1, ttl); err != nil {
				return err
			}
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			sb, err := cl.ResumeSandbox(cmd.Context(), args[0], int64(ttl/time.Second))
			if err != nil {
				return explain(noSuchSandbox(err, args[0]), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s resumed; expires in %s\n", sb.ID, fmtUntil(time.Now(), sb.ExpiresAtUnix))
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime from now (default: what it had left)")
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

func newCheckpointCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "checkpoint [flags] ID [NAME]",
		Short: "Save a running sandbox's state to roll back to later",
		Long: `Save a running sandbox's memory, processes and files as a named
checkpoint (without NAME, one is made up and printed), while it keeps running:
it stands still only while its state is written. cove rollback restores it.`,
		Example:           "  cove checkpoint $ID before-upgrade\n  cove rollback $ID before-upgrade",
		Args:              nArgs(1, 2, "give a sandbox ID and, optionally, a checkpoint name"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, name := args[0], ""
			if len(args) == 2 {
				name = args[1]
			}
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			c, err := cl.Checkpoint(cmd.Context(), id, tok, name)
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), c)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s, paused %d ms\n", c.Name, humanize.IBytes(uint64(c.SizeBytes)), c.PauseMs)
			return nil
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

func newCheckpointsCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:               "checkpoints [flags] ID",
		Short:             "List a sandbox's checkpoints",
		Example:           "  cove checkpoints $ID\n  cove checkpoints $ID --json",
		Args:              nArgs(1, 1, "give one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			cs, err := cl.Checkpoints(cmd.Context(), id, tok)
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			name := func(c apitype.CheckpointInfo) string { return c.Name }
			return printList(cmd.OutOrStdout(), asJSON, false, cs, name, printCheckpoints)
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// printCheckpoints writes a table of checkpoints.
func printCheckpoints(w io.Writer, cs []apitype.CheckpointInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tSIZE\tCREATED")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, humanize.IBytes(uint64(c.SizeBytes)), humanize.Time(time.Unix(c.CreatedAtUnix, 0)))
	}
	return tw.Flush()
}

func newRollbackCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "rollback [flags] ID NAME",
		Short: "Restore a sandbox to one of its checkpoints, in place",
		Long: `Roll a running sandbox back to checkpoint NAME: same id, token, network
policy and labels; memory, processes and files as they were at the checkpoint.
A checkpoint can be rolled back to any number of times.`,
		Example:           "  cove rollback $ID before-upgrade",
		Args:              nArgs(2, 2, "give a sandbox ID and a checkpoint name"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, name := args[0], args[1]
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			sb, err := cl.Rollback(cmd.Context(), id, tok, name)
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s rolled back to %s\n", sb.ID, name)
			return nil
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// addPauseFlags adds create's pause policy flags.
func addPauseFlags(cmd *cobra.Command, req *apitype.CreateSandboxRequest) {
	fs := cmd.Flags()
	fs.BoolVar(&req.AutoResume, "auto-resume", false, "resume the sandbox when a call reaches it paused")
	fs.StringVar(&req.OnExpiry, "on-expiry", "", "at the end of its lifetime: kill (the default) or pause")
	cmd.RegisterFlagCompletionFunc("on-expiry", cobra.FixedCompletions([]string{apitype.OnExpiryKill, apitype.OnExpiryPause}, cobra.ShellCompDirectiveNoFileComp))
}
