package main

// The network verbs: net (a sandbox's egress policy), expose, ports and
// unexpose (its preview URLs), port-forward (a port on this host).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newNetCmd(cfg *clientConfig) *cobra.Command {
	var (
		pf      policyFlags
		denyAll bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "net [flags] ID [set]",
		Short: "Show or replace a sandbox's network policy",
		Long: `Show the egress policy of sandbox ID, or with set, replace it: at once,
for the sandbox's new connections and lookups, without restarting it. A
sandbox reaches nothing but what its policy allows: names (--allow-domain,
resolved by cove's own DNS and checked again by HTTP Host and TLS SNI),
addresses (--allow-cidr) and the daemon's presets (--preset); --deny-*
take precedence. The host, other sandboxes and link-local and private
addresses stay out of reach unless a --allow-cidr names them.`,
		Example: `  cove net $ID
  cove net $ID set --preset pypi --allow-domain example.org
  cove net $ID set --allow-cidr 203.0.113.0/24 --deny-cidr 203.0.113.9
  cove net $ID set --deny-all`,
		Args:              nArgs(1, 2, "give a sandbox ID, and set to change its policy"),
		ValidArgsFunction: completeNet(cfg),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, set := args[0], len(args) == 2
			switch {
			case set && args[1] != "set":
				return usageErrorf("unknown %q: `cove net ID` shows the policy, `cove net ID set ...` replaces it", args[1])
			case !set && (pf.given() || denyAll):
				return usageErrorf("to change the policy, say set: cove net %s set ...", id)
			case set && pf.given() && denyAll:
				return usageErrorf("give the new policy or --deny-all, not both")
			case set && !pf.given() && !denyAll:
				return usageErrorf("give the new policy (--allow-domain, --allow-cidr, --deny-domain, --deny-cidr, --preset), or --deny-all")
			}
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			var info apitype.SandboxInfo
			if set {
				p := apitype.NetworkPolicy{}
				if !denyAll {
					p = *pf.policy()
				}
				info, err = cl.SetNetwork(cmd.Context(), id, p)
			} else {
				info, err = cl.GetSandbox(cmd.Context(), id)
			}
			if err != nil {
				return explain(policyHint(noSuchSandbox(err, id)), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), info.Network)
			}
			return printPolicy(cmd.OutOrStdout(), info.Network)
		},
	}
	addPolicyFlags(cmd, cfg, &pf, "with set")
	cmd.Flags().BoolVar(&denyAll, "deny-all", false, "with set: allow nothing at all")
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// policyHint adds what to do about a policy the daemon refused.
func policyHint(err error) error {
	if errors.Is(err, client.ErrBadRequest) {
		return fmt.Errorf("%w"+hintSep+"names are like example.org or *.example.org, CIDRs like 203.0.113.0/24; `cove info` lists the presets", err)
	}
	return err
}

// completeNet completes net's ID, then "set".
func completeNet(cfg *clientConfig) cobra.CompletionFunc {
	return completeIDThen(cfg, func(context.Context, string, string) []cobra.Completion {
		return []cobra.Completion{cobra.CompletionWithDesc("set", "replace the policy")}
	})
}

// parsePort reads a TCP port, 1-65535 (0 too if zeroOK).
func parsePort(s string, zeroOK bool) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 || p == 0 && !zeroOK {
		return 0, usageErrorf("port %q: want a number from 1 to 65535", s)
	}
	return p, nil
}

func newExposeCmd(cfg *clientConfig) *cobra.Command {
	var (
		public       bool
		sandboxToken string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "expose [flags] ID PORT",
		Short: "Serve a port of a sandbox at a preview URL",
		Long: `Serve PORT of sandbox ID at a preview URL of the daemon's, such as
http://8000-ID.localhost:8080, and print it. Start the server in the
sandbox first, in the background and listening on 0.0.0.0 (not
127.0.0.1). The URL takes the port's token (an X-Cove-Preview-Token
header, or ?token= once in a browser, which then keeps a cookie) unless
--public. It dies with the sandbox; cove unexpose ends it sooner.`,
		Example: `  cove exec $ID --shell 'nohup python3 -m http.server 8000 >/tmp/http.log 2>&1 &'
  cove expose $ID 8000
  cove expose $ID 3000 --public --json`,
		Args:              nArgs(2, 2, "give a sandbox ID and a PORT"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			port, err := parsePort(args[1], false)
			if err != nil {
				return err
			}
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			p, err := cl.ExposePort(cmd.Context(), id, tok, port, public)
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), p)
			}
			return printExposed(cmd.OutOrStdout(), p)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&public, "public", false, "serve it to anyone who has the URL, without the token")
	addSandboxTokenFlag(fs, &sandboxToken)
	addOutputFlags(fs, &asJSON, nil, "")
	return cmd
}

// printExposed writes an exposed port's URLs, with its token for a browser.
func printExposed(w io.Writer, p apitype.PortInfo) error {
	tw := newTable(w)
	access := "token required"
	if p.Public {
		access = "public"
	}
	fmt.Fprintf(tw, "port:\t%d (%s)\n", p.Port, access)
	if p.URL == "" {
		fmt.Fprintln(tw, "url:\t- (the daemon serves no previews: use cove port-forward)")
	} else {
		fmt.Fprintf(tw, "url:\t%s\n", client.URLWithToken(p.URL, p.Token))
	}
	if p.HTTPSURL != "" {
		fmt.Fprintf(tw, "https:\t%s\n", client.URLWithToken(p.HTTPSURL, p.Token))
	}
	if p.Token != "" && !p.Public {
		fmt.Fprintf(tw, "token:\t%s (send it as the X-Cove-Preview-Token header; a browser keeps it after the ?token= URL)\n", p.Token)
	}
	return tw.Flush()
}

func newPortsCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:               "ports [flags] ID",
		Short:             "List a sandbox's exposed ports, with their URLs and tokens",
		Example:           "  cove ports $ID\n  cove ports $ID --json",
		Args:              nArgs(1, 1, "give one sandbox ID"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			ps, err := cl.ListPorts(cmd.Context(), id, tok)
			if err != nil {
				return explain(noSuchSandbox(err, id), daemon)
			}
			port := func(p apitype.PortInfo) string { return strconv.Itoa(p.Port) }
			return printList(cmd.OutOrStdout(), asJSON, false, ps, port, printPorts)
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// printPorts writes a table of exposed ports.
func printPorts(w io.Writer, ps []apitype.PortInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "PORT\tACCESS\tURL\tHTTPS-URL\tTOKEN")
	for _, p := range ps {
		access := "token"
		if p.Public {
			access = "public"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Port, access, dash(p.URL), dash(p.HTTPSURL), dash(p.Token))
	}
	return tw.Flush()
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newUnexposeCmd(cfg *clientConfig) *cobra.Command {
	var sandboxToken string
	cmd := &cobra.Command{
		Use:               "unexpose [flags] ID PORT",
		Short:             "Stop serving a sandbox's port at its preview URLs",
		Example:           "  cove unexpose $ID 8000",
		Args:              nArgs(2, 2, "give a sandbox ID and a PORT"),
		ValidArgsFunction: completeUnexpose(cfg),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			port, err := parsePort(args[1], false)
			if err != nil {
				return err
			}
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			if err := cl.UnexposePort(cmd.Context(), id, tok, port); err != nil {
				if errors.Is(err, client.ErrNotFound) {
					err = notFoundIn(cmd.Context(), cl, err, id)
				}
				return explain(err, daemon)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "unexposed %d\n", port)
			return err
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	return cmd
}

// completeUnexpose completes unexpose's ID, then the ports it has exposed.
func completeUnexpose(cfg *clientConfig) cobra.CompletionFunc {
	return completeIDThen(cfg, cfg.exposedPorts)
}

// exposedPorts returns the ports sandbox id has exposed that start with
// prefix, described by their URLs.
func (c *clientConfig) exposedPorts(ctx context.Context, id, prefix string) []cobra.Completion {
	get := func(cl *client.Client, ctx context.Context) ([]apitype.PortInfo, error) {
		sb, err := cl.GetSandbox(ctx, id)
		return sb.Ports, err
	}
	port := func(p apitype.PortInfo) string { return strconv.Itoa(p.Port) }
	desc := func(p apitype.PortInfo) string { return dash(p.URL) }
	return candidates(ctx, c, get, prefix, nil, port, desc)
}

func newPortForwardCmd(cfg *clientConfig) *cobra.Command {
	var sandboxToken string
	cmd := &cobra.Command{
		Use:   "port-forward [flags] ID [LOCAL:]REMOTE",
		Short: "Reach a sandbox's port from this host, until Ctrl-C",
		Long: `Listen on 127.0.0.1:LOCAL and carry each connection to port REMOTE of
sandbox ID, through the daemon: no preview URL, no token to pass, and any
TCP protocol. REMOTE alone listens on the same port number; LOCAL 0 picks
a free one. It runs until interrupted.`,
		Example: `  cove port-forward $ID 8000
  cove port-forward $ID 5433:5432
  cove port-forward $ID 0:8000`,
		Args:              nArgs(2, 2, "give a sandbox ID and LOCAL:REMOTE ports"),
		ValidArgsFunction: completeFirst(cfg.sandboxIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			local, remote, err := parseForward(args[1])
			if err != nil {
				return err
			}
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			return portForward(cmd, cl, daemon, id, tok, local, remote)
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	return cmd
}

// parseForward reads [LOCAL:]REMOTE.
func parseForward(s string) (local, remote int, err error) {
	l, r, pair := strings.Cut(s, ":")
	if !pair {
		r = l
	}
	if remote, err = parsePort(r, false); err != nil {
		return 0, 0, err
	}
	if local, err = parsePort(l, true); err != nil {
		return 0, 0, err
	}
	return local, remote, nil
}

// portForward forwards 127.0.0.1:local to remote in sandbox id until the
// command's context ends.
func portForward(cmd *cobra.Command, cl *client.Client, daemon, id, tok string, local, remote int) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	// Check the sandbox and its token before listening, so that a typo
	// fails now rather than at the first connection.
	if _, err := cl.ListPorts(ctx, id, tok); err != nil {
		return explain(noSuchSandbox(err, id), daemon)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1:%d: %w", local, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "forwarding %s to port %d of %s; Ctrl-C to stop\n", l.Addr(), remote, id)
	err = cl.PortForward(ctx, l, id, tok, remote, func(err error) {
		if errors.Is(err, client.ErrBadGateway) {
			err = fmt.Errorf("%w"+hintSep+"start the server in the sandbox, listening on 0.0.0.0:%d", err, remote)
		}
		fmt.Fprintf(stderr, "%s: a connection: %v\n", cmd.CommandPath(), explain(err, daemon))
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
