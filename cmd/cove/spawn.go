package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func newSpawnCmd(cfg *clientConfig) *cobra.Command {
	var (
		req          apitype.CreateSandboxRequest
		ttl          time.Duration
		sandboxToken string
		asJSON, ids  bool
		pf           policyFlags
		meta         metaFlags
	)
	cmd := &cobra.Command{
		Use:   "spawn [flags] TAG",
		Short: "Start sandboxes from a snapshot",
		Long: `Start sandboxes from snapshot TAG (cove snapshot ls lists them): in
milliseconds from its warm pool, else restored. Their sandbox tokens are
remembered for exec and cp; --json shows them. They take the snapshot's
network policy unless the policy flags give another.`,
		Example: `  ID=$(cove spawn default -q)
  cove spawn py -n 10 --ttl 30m
  cove spawn py --allow-domain example.org
  cove spawn py --prewarm
  cove spawn py --label job=42 --user user`,
		Args:              nArgs(1, 1, "give one snapshot TAG (`cove snapshot ls` lists them)"),
		ValidArgsFunction: completeFirst(cfg.snapshotTags),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNTTL(req.N, 1, ttl); err != nil {
				return err
			}
			req.SnapshotTag, req.TTLSecs = args[0], int64(ttl/time.Second)
			req.Network = pf.policy()
			req.Labels, req.Env, req.User, req.Cwd = meta.values()
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			req.SandboxToken = snapshotTokenFor(cmd.ErrOrStderr(), sandboxToken, daemon, req.SnapshotTag)
			sbs, err := cl.CreateSandboxes(cmd.Context(), req)
			if err != nil {
				return explain(snapshotHint(err, req.SnapshotTag), daemon)
			}
			// Save the tokens before printing: they exist only in this answer.
			rememberSandboxTokens(cmd.ErrOrStderr(), "spawn", daemon, sbs)
			return printMade(cmd.OutOrStdout(), asJSON, ids, sbs)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&req.N, "count", "n", 1, "how many sandboxes to start from the snapshot")
	fs.DurationVar(&ttl, "ttl", 0, "lifetime, e.g. 15m (default: the daemon's)")
	fs.BoolVar(&req.Prewarm, "prewarm", false, "also refill the snapshot's warm pool, so the next spawn is served from it")
	addSnapshotTokenFlag(fs, &sandboxToken)
	meta.add(fs, "the snapshot's")
	addOutputFlags(fs, &asJSON, &ids, "print only the sandbox ids, one a line")
	addPolicyFlags(cmd, cfg, &pf, "egress (default: the snapshot's)")
	return cmd
}
