package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newCreateCmd(cfg *clientConfig) *cobra.Command {
	var (
		req          apitype.CreateSandboxRequest
		ttl          time.Duration
		sandboxToken string
		asJSON, ids  bool
		pf           policyFlags
		meta         metaFlags
	)
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create sandboxes",
		Long: `Create sandboxes, cold-booted from the guest image or started from a
snapshot, and print them. Their sandbox tokens are remembered for exec and
cp; --json shows them. They reach no network unless the policy flags allow
it (a snapshot's children take its policy); cove net changes it later.`,
		Example: `  ID=$(cove create -q)
  cove create -n 3 --ttl 1h --cpus 2 --memory-mib 1024
  cove create --preset pypi --allow-domain example.org
  cove create --user user --env CI=1 --cwd /home/user --label team=a
  cove create --snapshot py --json`,
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkNTTL(req.N, 1, ttl); err != nil {
				return err
			}
			req.TTLSecs = int64(ttl / time.Second)
			req.Network = pf.policy()
			req.Labels, req.Env, req.User, req.Cwd = meta.values()
			// Cold starts of many sandboxes take a while; allow for them on
			// top of the usual bound rather than fail a create that is
			// progressing.
			cl, daemon, err := cfg.client(client.WithTimeout(client.DefaultTimeout + time.Duration(req.N)*time.Second))
			if err != nil {
				return err
			}
			if req.SnapshotTag != "" {
				req.SandboxToken = snapshotTokenFor(cmd.ErrOrStderr(), sandboxToken, daemon, req.SnapshotTag)
			}
			sbs, err := cl.CreateSandboxes(cmd.Context(), req)
			if err != nil && req.SnapshotTag != "" {
				err = snapshotHint(err, req.SnapshotTag)
			}
			if err != nil {
				return explain(err, daemon)
			}
			// Save the tokens before printing: they exist only in this answer.
			rememberSandboxTokens(cmd.ErrOrStderr(), "create", daemon, sbs)
			return printMade(cmd.OutOrStdout(), asJSON, ids, sbs)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&req.N, "count", "n", 1, "how many sandboxes to create")
	fs.DurationVar(&ttl, "ttl", 0, "lifetime, e.g. 15m (default: the daemon's)")
	fs.IntVar(&req.CPUs, "cpus", 0, "CPUs per sandbox (default: the daemon's)")
	fs.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory per sandbox in MiB (default: the daemon's)")
	fs.IntVar(&req.DiskMiB, "disk-mib", 0, "disk space each sandbox may write, in MiB (default: the daemon's)")
	fs.IntVar(&req.Pids, "pids", 0, "processes and threads per sandbox (default: the daemon's)")
	fs.StringVar(&req.Image, "image", "", "guest image (default: the daemon's)")
	fs.StringVar(&req.SnapshotTag, "snapshot", "", "start from this snapshot tag instead of booting the image")
	addSnapshotTokenFlag(fs, &sandboxToken)
	meta.add(fs, "a snapshot's children take its")
	addOutputFlags(fs, &asJSON, &ids, "print only the sandbox ids, one a line")
	addPolicyFlags(cmd, cfg, &pf, "egress")
	addPauseFlags(cmd, &req)
	cmd.RegisterFlagCompletionFunc("snapshot", completeEach(cfg.snapshotTags))
	return cmd
}

// checkNTTL refuses an -n outside minN..apitype.MaxN, and a --ttl the
// daemon would round to nothing.
func checkNTTL(n, minN int, ttl time.Duration) error {
	if n < minN || n > apitype.MaxN {
		return usageErrorf("-n must be between %d and %d", minN, apitype.MaxN)
	}
	if ttl != 0 && ttl < time.Second {
		return usageErrorf("--ttl must be at least 1s")
	}
	return nil
}
