package main

import (
	"errors"
	"fmt"
	"sync"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/client"
)

// killParallel bounds concurrent deletes for `cove kill --all`.
const killParallel = 16

// killResult is the outcome for one sandbox, as --json prints it.
type killResult struct {
	ID     string `json:"id"`
	Killed bool   `json:"killed"`
	Error  string `json:"error,omitempty"`
	gone   bool   // killed, or already gone: forget its token
}

func newKillCmd(cfg *clientConfig) *cobra.Command {
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "kill [flags] ID... | --all",
		Short: "Destroy sandboxes",
		Long: `Destroy sandboxes, with everything in them, and forget their sandbox
tokens. A sandbox already gone counts as killed with --all, as an error
when named.`,
		Example: `  cove kill $ID
  cove kill --all`,
		ValidArgsFunction: completeEach(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, ids []string) error {
			switch {
			case all && len(ids) > 0:
				return usageErrorf("give sandbox IDs or --all, not both")
			case !all && len(ids) == 0:
				return usageErrorf("give sandbox IDs, or --all")
			}
			return kill(cmd, cfg, ids, all, asJSON)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "kill every sandbox on the daemon")
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// kill destroys sandboxes ids, or all of them.
func kill(cmd *cobra.Command, cfg *clientConfig, ids []string, all, asJSON bool) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	cl, daemon, err := cfg.client()
	if err != nil {
		return err
	}
	if all {
		sbs, err := cl.ListSandboxes(ctx)
		if err != nil {
			return explain(err, daemon)
		}
		for _, sb := range sbs {
			ids = append(ids, sb.ID)
		}
	}

	results := make([]killResult, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, killParallel)
	for i, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			err := cl.DeleteSandbox(ctx, id)
			notFound := errors.Is(err, client.ErrNotFound)
			r := killResult{ID: id, Killed: err == nil, gone: err == nil || notFound}
			// A sandbox that --all listed may expire before we get to it.
			if all && notFound {
				r.Killed = true
			}
			if !r.Killed {
				r.Error = explain(noSuchSandbox(err, id), daemon).Error()
			}
			results[i] = r
		})
	}
	wg.Wait()

	// Forget the tokens of sandboxes that are gone, including those
	// that already were (not found).
	var gone []string
	var failed int
	for _, r := range results {
		if r.gone {
			gone = append(gone, r.ID)
		}
		if !r.Killed {
			failed++
		}
	}
	if st, err := defaultSandboxTokens(); err == nil && len(gone) > 0 {
		if err := st.remove(daemon, gone...); err != nil {
			fmt.Fprintf(stderr, "cove kill: warning: %v\n", err)
		}
	}

	if asJSON {
		if err := printJSON(stdout, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Killed {
				fmt.Fprintf(stdout, "killed %s\n", r.ID)
			} else {
				fmt.Fprintf(stderr, "cove kill: %s\n", r.Error)
			}
		}
		if all && len(ids) == 0 {
			fmt.Fprintln(stdout, "no sandboxes")
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d sandboxes not killed", failed, len(results))
	}
	return nil
}
