package main

// Dynamic shell completion: sandbox ids and snapshot tags, asked of the
// daemon. cobra's `cove completion bash|zsh|fish` scripts call these
// through `cove __complete`; when the daemon can't be reached they offer
// nothing, quietly.

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// completionTimeout bounds a completion's call to the daemon: a shell
// waiting on <Tab> should not hang.
const completionTimeout = 3 * time.Second

// sandboxIDs returns the ids of the daemon's sandboxes that start with
// prefix and are not in skip, described by status, image and expiry.
func (c *clientConfig) sandboxIDs(ctx context.Context, prefix string, skip []string) []cobra.Completion {
	return candidates(ctx, c, (*client.Client).ListSandboxes, prefix, skip, sandboxID, sandboxDesc(time.Now()))
}

// sandboxDesc describes a sandbox to complete, as of now.
func sandboxDesc(now time.Time) func(apitype.SandboxInfo) string {
	return func(sb apitype.SandboxInfo) string {
		d := sb.Status + ", " + sandboxImage(sb)
		if u := fmtUntil(now, sb.ExpiresAtUnix); u != "-" && u != "expired" {
			d += ", expires in " + u
		}
		return d
	}
}

// snapshotTags returns the tags of the daemon's snapshots that start with
// prefix and are not in skip, described by their image.
func (c *clientConfig) snapshotTags(ctx context.Context, prefix string, skip []string) []cobra.Completion {
	tag := func(si apitype.SnapshotInfo) string { return si.Tag }
	image := func(si apitype.SnapshotInfo) string { return si.Image }
	return candidates(ctx, c, (*client.Client).ListSnapshots, prefix, skip, tag, image)
}

// candidates asks the daemon for a list, and returns the names in it that
// start with prefix and are not in skip, with their descriptions; none if
// the daemon cannot be asked.
func candidates[T any](ctx context.Context, c *clientConfig, list func(*client.Client, context.Context) ([]T, error),
	prefix string, skip []string, name, desc func(T) string) []cobra.Completion {
	cl, _, err := c.client(client.WithTimeout(completionTimeout))
	if err != nil {
		return nil
	}
	items, err := list(cl, ctx)
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, it := range items {
		if n := name(it); strings.HasPrefix(n, prefix) && !slices.Contains(skip, n) {
			out = append(out, cobra.CompletionWithDesc(n, desc(it)))
		}
	}
	return out
}

// completeNothing is the ValidArgsFunction of a verb that takes no
// arguments, or none that are files: it offers none, rather than the
// directory's files.
func completeNothing(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeFirst completes a verb's first argument with list and offers
// nothing for the others.
func completeFirst(list func(ctx context.Context, prefix string, skip []string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return list(cmd.Context(), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeIDThen completes a verb's first argument with sandbox ids and its
// second with next(ctx, id, prefix), and offers nothing for the others.
func completeIDThen(cfg *clientConfig, next func(ctx context.Context, id, prefix string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return cfg.sandboxIDs(cmd.Context(), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
		case 1:
			return next(cmd.Context(), args[0], toComplete), cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeEach completes every argument with list, less those given.
func completeEach(list func(ctx context.Context, prefix string, skip []string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return list(cmd.Context(), toComplete, args), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeCp completes cp's SRC and DST: "ID:" for the sandbox's side,
// local files for the other.
func (c *clientConfig) completeCp(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) >= 2 || strings.Contains(toComplete, ":") {
		return nil, cobra.ShellCompDirectiveNoFileComp // paths in a sandbox are not completed
	}
	otherLocal := false
	if len(args) == 1 {
		_, _, remote := splitRemote(args[0])
		if remote {
			return nil, cobra.ShellCompDirectiveDefault
		}
		otherLocal = true
	}
	var out []cobra.Completion
	if _, _, remote := splitRemote(toComplete + ":"); remote || toComplete == "" {
		for _, id := range c.sandboxIDs(cmd.Context(), toComplete, nil) {
			id, desc, _ := strings.Cut(id, "\t")
			out = append(out, cobra.CompletionWithDesc(id+":", desc))
		}
	}
	if len(out) == 0 && !otherLocal {
		return nil, cobra.ShellCompDirectiveDefault
	}
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}
