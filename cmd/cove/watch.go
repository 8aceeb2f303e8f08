package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newWatchCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken      string
		asJSON, recursive bool
	)
	cmd := &cobra.Command{
		Use:   "watch [flags] ID DIR",
		Short: "Print the changes in a sandbox's directory as they happen",
		Long: `Print one line per change in directory DIR of sandbox ID (relative to /work):
its time, what happened (create, write, remove, rename, chmod) and the path, a
directory's with a trailing slash. A rename prints the old path; its new one,
if watched, follows as a create. With -r, the directories below DIR are watched
too, also ones made later. Runs until interrupted, or until DIR itself goes.
--json prints the API's records (NDJSON), starting with {"type":"ready"}.`,
		Example: `  cove watch $ID src -r
  cove watch $ID /tmp --json`,
		Args:              nArgs(2, 2, "need ID and DIR"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, dir := args[0], args[1]
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			enc := json.NewEncoder(stdout)
			err = cl.Watch(ctx, id, tok, dir, recursive, func(ev apitype.WatchEvent) error {
				if asJSON {
					return enc.Encode(ev)
				}
				return printWatchEvent(stdout, stderr, ev)
			})
			switch {
			case errors.Is(err, client.ErrWatchEnded):
				if !asJSON {
					fmt.Fprintf(stderr, "%s is gone: the watch is over\n", dir)
				}
				return nil
			case err != nil:
				return explain(notFoundIn(ctx, cl, err, id), daemon)
			}
			return nil
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch the directories below DIR too")
	return cmd
}

// printWatchEvent prints ev as one line, the watch's own records on
// stderr.
func printWatchEvent(stdout, stderr io.Writer, ev apitype.WatchEvent) error {
	switch ev.Type {
	case apitype.WatchReady:
		_, err := fmt.Fprintf(stderr, "watching %s\n", ev.Path)
		return err
	case apitype.WatchEnd:
		return nil
	case apitype.WatchOverflow:
		n := "an unknown number of"
		if ev.Dropped > 0 {
			n = fmt.Sprint(ev.Dropped)
		}
		_, err := fmt.Fprintf(stderr, "%s events were dropped here: the watch could not keep up\n", n)
		return err
	}
	p := ev.Path
	if ev.IsDir {
		p += "/"
	}
	_, err := fmt.Fprintf(stdout, "%s %-6s %s\n", ev.Time.Local().Format("15:04:05.000"), ev.Type, p)
	return err
}
