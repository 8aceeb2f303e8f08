package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func runBranch(ctx context.Context, args []string) error {
	fs, c := newFlagSet("branch", "branch [flags] ID")
	n := fs.Int("n", 0, "children to start from the new snapshot in the same call")
	tag := fs.String("tag", "", "the new snapshot's tag (default: generated)")
	ttl := fs.Duration("ttl", 0, "the children's lifetime, e.g. 15m (default: the daemon's)")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("give one sandbox ID")
	}
	if *n < 0 || *n > apitype.MaxN {
		return fmt.Errorf("-n must be between 0 and %d", apitype.MaxN)
	}
	if *ttl != 0 && *ttl < time.Second {
		return fmt.Errorf("--ttl must be at least 1s")
	}
	id := pos[0]
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	br, err := cl.Branch(ctx, id, apitype.BranchRequest{Tag: *tag, N: *n, TTLSecs: int64(*ttl / time.Second)})
	if err != nil {
		return explain(noSuchSandbox(err, id), daemon)
	}
	rememberTokens("branch", daemon, br.Children)
	if c.json {
		return printJSON(os.Stdout, br)
	}
	return printBranch(os.Stdout, br)
}

// printBranch writes the new snapshot, the pause, and the children.
func printBranch(w io.Writer, br apitype.BranchResponse) error {
	fmt.Fprintf(w, "snapshot  %s (depth %d", br.Tag, br.Depth)
	if br.BranchedFrom != "" {
		fmt.Fprintf(w, ", branched from %s", br.BranchedFrom)
	}
	if br.Parent != "" {
		fmt.Fprintf(w, ", spawned from %s", br.Parent)
	}
	fmt.Fprintf(w, ")\npaused    %.1f ms (stopped %.1f ms)\n", br.PauseMs, br.StoppedMs)
	if len(br.Children) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return printSandboxes(w, br.Children)
}
