package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

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

func runKill(ctx context.Context, args []string) error {
	fs, c := newFlagSet("kill", "kill [flags] ID... | --all")
	all := fs.Bool("all", false, "kill every sandbox on the daemon")
	ids, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	switch {
	case *all && len(ids) > 0:
		return errors.New("give sandbox IDs or --all, not both")
	case !*all && len(ids) == 0:
		fs.Usage()
		return errors.New("give sandbox IDs, or --all")
	}
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	if *all {
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
			if *all && notFound {
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
	if st, err := defaultTokenStore(); err == nil && len(gone) > 0 {
		if err := st.remove(daemon, gone...); err != nil {
			fmt.Fprintf(os.Stderr, "cove kill: warning: %v\n", err)
		}
	}

	if c.json {
		if err := printJSON(os.Stdout, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Killed {
				fmt.Printf("killed %s\n", r.ID)
			} else {
				fmt.Fprintf(os.Stderr, "cove kill: %s\n", r.Error)
			}
		}
		if *all && len(ids) == 0 {
			fmt.Println("no sandboxes")
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d sandboxes not killed", failed, len(results))
	}
	return nil
}
