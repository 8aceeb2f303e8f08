package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newKeysCmd(cfg *clientConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage API keys and their tenants (an admin key's job)",
		Long: `Create, list and revoke API keys. Each key belongs to a tenant, which sees
only its own sandboxes, snapshots and templates, within the key's quota. The
daemon's own key (its token file) is the admin key of the tenant "default".
A key is shown once, when it is created: the daemon keeps only its hash.`,
		Example: `  cove keys create --name ci --tenant acme --max-sandboxes 10
  cove keys ls
  cove keys revoke key-0123456789ab`,
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
	}
	cmd.AddCommand(newKeysCreateCmd(cfg), newKeysLsCmd(cfg), newKeysRevokeCmd(cfg))
	return cmd
}

func newKeysCreateCmd(cfg *clientConfig) *cobra.Command {
	var req apitype.CreateKeyRequest
	var asJSON, noReveal bool
	cmd := &cobra.Command{
		Use:   "create --name NAME --tenant TENANT [flags]",
		Short: "Create an API key, shown once",
		Long: `Create an API key for a tenant (made by its first key) with a quota; a
quota left at 0 is unlimited. The key is printed once: keep it. The line
E2B_API_KEY=e2b_<key> is the same key for E2B's SDKs.`,
		Example: `  cove keys create --name ci --tenant acme --max-sandboxes 10 --max-memory-mib 8192
  cove keys create --name ops --tenant ops --admin --json`,
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			if noReveal {
				reveal := false
				req.RevealTokens = &reveal
			}
			k, err := cl.CreateKey(cmd.Context(), req)
			if err != nil {
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), k)
			}
			return printNewKey(cmd.OutOrStdout(), k)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Name, "name", "", "what the key is for (required)")
	fs.StringVar(&req.Tenant, "tenant", "", "the tenant the key acts for: a-z, 0-9 and -, at most 63 (required)")
	fs.BoolVar(&req.Admin, "admin", false, "an admin key: manages keys and sees every tenant")
	fs.BoolVar(&noReveal, "no-reveal-tokens", false, "never give this key a sandbox's token after create (E2B's connect then answers 403)")
	fs.IntVar(&req.MaxSandboxes, "max-sandboxes", 0, "most sandboxes the tenant holds at once (0: unlimited)")
	fs.IntVar(&req.MaxVCPUs, "max-vcpus", 0, "most vCPUs of its sandboxes together (0: unlimited)")
	fs.Int64Var(&req.MaxMemoryMiB, "max-memory-mib", 0, "most memory of its sandboxes together, in MiB (0: unlimited)")
	fs.Int64Var(&req.MaxTTLSecs, "max-ttl-secs", 0, "longest lifetime a sandbox may ask for, in seconds (0: the daemon's)")
	fs.IntVar(&req.MaxSpawnN, "max-spawn-n", 0, "most sandboxes one create, spawn or branch makes (0: the daemon's)")
	fs.Int64Var(&req.MaxDiskMiB, "max-disk-mib", 0, "most disk its snapshots, templates and paused sandboxes take, in MiB (0: unlimited)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("tenant")
	addOutputFlags(fs, &asJSON, nil, "")
	return cmd
}

// printNewKey writes a new key as a table, its secret included, and the
// line E2B's SDKs read.
func printNewKey(w io.Writer, k apitype.CreateKeyResponse) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "ID\t%s\nNAME\t%s\nTENANT\t%s\nADMIN\t%t\nQUOTA\t%s\nKEY\t%s\n", k.ID, k.Name, k.Tenant, k.Admin, fmtQuota(k.UsageQuota), k.Key)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nThe key is shown only now: keep it.\nE2B_API_KEY=e2b_%s\n", k.Key)
	return err
}

// fmtQuota lists a quota's limits, "unlimited" for none.
func fmtQuota(q apitype.UsageQuota) string {
	var parts []string
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"sandboxes", int64(q.MaxSandboxes)}, {"vcpus", int64(q.MaxVCPUs)}, {"memory_mib", q.MaxMemoryMiB},
		{"ttl_secs", q.MaxTTLSecs}, {"spawn_n", int64(q.MaxSpawnN)}, {"disk_mib", q.MaxDiskMiB},
	} {
		if f.v != 0 {
			parts = append(parts, f.name+"="+strconv.FormatInt(f.v, 10))
		}
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, " ")
}

func newKeysLsCmd(cfg *clientConfig) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:               "ls",
		Aliases:           []string{"list"},
		Short:             "List API keys (never their secrets)",
		Example:           "  cove keys ls\n  cove keys ls --json",
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			list, err := cl.ListKeys(cmd.Context())
			if err != nil {
				return explain(err, daemon)
			}
			return printList(cmd.OutOrStdout(), asJSON, quiet, list, func(k apitype.KeyInfo) string { return k.ID }, printKeys)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, &quiet, "print only key ids")
	return cmd
}

func printKeys(w io.Writer, list []apitype.KeyInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tTENANT\tADMIN\tSTATUS\tCREATED\tQUOTA")
	for _, k := range list {
		status := "live"
		if k.Revoked {
			status = "revoked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\t%s\n", k.ID, k.Name, k.Tenant, k.Admin, status,
			k.CreatedAt.UTC().Format(time.RFC3339), fmtQuota(k.UsageQuota))
	}
	return tw.Flush()
}

// revokedKey is one line of `cove keys revoke --json`.
type revokedKey struct {
	ID      string `json:"id"`
	Revoked bool   `json:"revoked"`
	Error   string `json:"error,omitempty"`
}

func newKeysRevokeCmd(cfg *clientConfig) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revoke ID...",
		Short: "Revoke API keys: they stop working at once",
		Long: `Revoke API keys by id. A revoked key gets 401 on its next call, and what it
has open (exec and watch streams, MCP sessions) ends now. The key's sandboxes
live on until they expire or are killed.`,
		Example:           "  cove keys revoke key-0123456789ab",
		Args:              nArgs(1, -1, "give key IDs (cove keys ls lists them)"),
		ValidArgsFunction: completeEach(cfg.keyIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			var errs []error
			var out []revokedKey
			for _, id := range args {
				if err := cl.RevokeKey(cmd.Context(), id); err != nil {
					err = explain(err, daemon)
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					out = append(out, revokedKey{ID: id, Error: err.Error()})
					continue
				}
				out = append(out, revokedKey{ID: id, Revoked: true})
				if !asJSON {
					fmt.Fprintln(cmd.OutOrStdout(), id)
				}
			}
			if asJSON {
				if err := printJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// keyIDs completes the ids of live keys, described by name and tenant.
func (c *clientConfig) keyIDs(ctx context.Context, prefix string, skip []string) []cobra.Completion {
	list := func(cl *client.Client, ctx context.Context) ([]apitype.KeyInfo, error) {
		all, err := cl.ListKeys(ctx)
		var live []apitype.KeyInfo
		for _, k := range all {
			if !k.Revoked {
				live = append(live, k)
			}
		}
		return live, err
	}
	return candidates(ctx, c, list, prefix, skip, func(k apitype.KeyInfo) string { return k.ID },
		func(k apitype.KeyInfo) string { return k.Name + ", tenant " + k.Tenant })
}
