package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func newBranchCmd(cfg *clientConfig) *cobra.Command {
	var (
		req          apitype.BranchRequest
		ttl          time.Duration
		sandboxToken string
		asJSON, ids  bool
		pf           policyFlags
		meta         metaFlags
	)
	cmd := &cobra.Command{
		Use:   "branch [flags] ID",
		Short: "Snapshot a running sandbox, and start children from it",
		Long: `Checkpoint running sandbox ID (memory, processes, files) into a new
snapshot, pausing it briefly, and start -n children from that snapshot.
The children's sandbox tokens are remembered for exec and cp. Branching
copies the sandbox, so it takes the sandbox's token, as exec does; so
does spawning from the new snapshot later, and cove remembers it for that.
The snapshot and the children take the sandbox's network policy unless the
policy flags give another.`,
		Example: `  cove branch $ID -n 3
  KIDS=$(cove branch $ID -n 3 -q)
  cove branch $ID --tag before-upgrade`,
		Args:              nArgs(1, 1, "give one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNTTL(req.N, 0, ttl); err != nil {
				return err
			}
			id := args[0]
			req.TTLSecs = int64(ttl / time.Second)
			req.Network = pf.policy()
			req.Labels, req.Env, req.User, req.Cwd = meta.values()
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			br, err := cl.Branch(cmd.Context(), id, tok, req)
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			rememberSandboxTokens(cmd.ErrOrStderr(), "branch", daemon, br.Children)
			rememberSnapshotToken(cmd.ErrOrStderr(), "branch", daemon, br.Tag, tok)
			w := cmd.OutOrStdout()
			switch {
			case asJSON:
				return printJSON(w, br)
			case ids:
				return printMade(w, false, true, br.Children)
			}
			return printBranch(w, br)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&req.N, "count", "n", 0, "children to start from the new snapshot in the same call")
	fs.StringVar(&req.Tag, "tag", "", "the new snapshot's tag (default: generated)")
	fs.DurationVar(&ttl, "ttl", 0, "the children's lifetime, e.g. 15m (default: the daemon's)")
	addSandboxTokenFlag(fs, &sandboxToken)
	meta.add(fs, "the sandbox's")
	addOutputFlags(fs, &asJSON, &ids, "print only the children's ids, one a line")
	addPolicyFlags(cmd, cfg, &pf, "the children's egress (default: the sandbox's)")
	return cmd
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
