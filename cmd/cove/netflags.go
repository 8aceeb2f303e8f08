package main

// The network policy flags of create, spawn, branch, snapshot build and
// net set, and how a policy prints.

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// policyFlags are the flags that give a network policy.
type policyFlags struct {
	p  apitype.NetworkPolicy
	fs *pflag.FlagSet
}

// policyFlagNames are the flags addPolicyFlags adds.
var policyFlagNames = []string{"allow-domain", "allow-cidr", "deny-domain", "deny-cidr", "preset"}

// addPolicyFlags adds the policy flags to cmd; of says whose policy they
// give, for their help.
func addPolicyFlags(cmd *cobra.Command, cfg *clientConfig, pf *policyFlags, of string) {
	fs := cmd.Flags()
	pf.fs = fs
	fs.StringSliceVar(&pf.p.AllowDomains, "allow-domain", nil, of+": a name it may reach (example.org, or *.example.org for every name below it); repeatable")
	fs.StringSliceVar(&pf.p.AllowCIDRs, "allow-cidr", nil, of+": addresses it may reach (203.0.113.0/24, 203.0.113.7); repeatable")
	fs.StringSliceVar(&pf.p.DenyDomains, "deny-domain", nil, of+": a name it may never reach, whatever else allows it; repeatable")
	fs.StringSliceVar(&pf.p.DenyCIDRs, "deny-cidr", nil, of+": addresses it may never reach; repeatable")
	fs.StringSliceVar(&pf.p.Presets, "preset", nil, of+": a policy of the daemon's to add, such as pypi (cove info lists them); repeatable")
	cmd.RegisterFlagCompletionFunc("preset", completeEach(cfg.presets))
}

// given reports whether any policy flag was given.
func (pf *policyFlags) given() bool {
	for _, n := range policyFlagNames {
		if pf.fs.Changed(n) {
			return true
		}
	}
	return false
}

// policy is the policy the flags give; nil if none was given.
func (pf *policyFlags) policy() *apitype.NetworkPolicy {
	if !pf.given() {
		return nil
	}
	p := pf.p
	return &p
}

// presets returns the daemon's network presets that start with prefix and
// are not in skip.
func (c *clientConfig) presets(ctx context.Context, prefix string, skip []string) []cobra.Completion {
	info := func(cl *client.Client, ctx context.Context) ([]string, error) {
		i, err := cl.Info(ctx)
		return i.Network.Presets, err
	}
	name := func(s string) string { return s }
	return candidates(ctx, c, info, prefix, skip, name, func(string) string { return "network preset" })
}

// printPolicy writes a policy as lines of a table.
func printPolicy(w io.Writer, p apitype.NetworkPolicy) error {
	tw := newTable(w)
	policyRows(tw, p)
	return tw.Flush()
}

// policyRows writes a policy's rows into tw.
func policyRows(tw io.Writer, p apitype.NetworkPolicy) {
	if p.IsZero() {
		fmt.Fprintln(tw, "egress:\tdenied: the sandbox reaches nothing")
		return
	}
	list := func(v []string) string { return dash(strings.Join(v, ", ")) }
	fmt.Fprintln(tw, "egress:\tonly what is allowed, less what is denied")
	fmt.Fprintf(tw, "allow domains:\t%s\n", list(p.AllowDomains))
	fmt.Fprintf(tw, "allow cidrs:\t%s\n", list(p.AllowCIDRs))
	fmt.Fprintf(tw, "deny domains:\t%s\n", list(p.DenyDomains))
	fmt.Fprintf(tw, "deny cidrs:\t%s\n", list(p.DenyCIDRs))
	fmt.Fprintf(tw, "presets:\t%s\n", list(p.Presets))
}
