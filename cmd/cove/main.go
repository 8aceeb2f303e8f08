// Command cove is the cove daemon and its command-line client.
//
//	cove serve                 run the daemon
//	cove image build           build the guest image
//	cove create|ls|exec|shell|cp|kill|info|bench ...   talk to a running daemon
//	cove net|expose|ports|unexpose|port-forward  a sandbox's network and ports
//	cove snapshot|spawn|branch ...               snapshots and their children
//	cove mcp                   MCP server over stdio, for Claude Code, Cursor, ...
//	cove completion bash|zsh|fish                shell completion
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=..."
var version = "dev"

// newRootCmd returns the cove command with every verb under it.
func newRootCmd() *cobra.Command {
	cfg := new(clientConfig)
	root := &cobra.Command{
		Use:   "cove",
		Short: "Disposable, isolated Linux sandboxes for AI coding agents",
		Long: `cove runs disposable, isolated Linux sandboxes for AI coding agents.

cove serve is the daemon; the other verbs are its client. They find it at
--url or $COVE_URL (default ` + defaultURL + `) and authenticate with its
API key: --api-key, else $COVE_API_KEY (or $COVE_TOKEN), else the API key
file the daemon writes (` + defaultAPIKeyFile + `). exec and cp also need the
sandbox token of their sandbox: create, spawn and branch remember the tokens
of the sandboxes they make.`,
		Example: `  ID=$(cove create -q)
  cove exec $ID -- python3 -c 'print(1+1)'
  cove kill $ID
  source <(cove completion bash)   # or zsh, fish`,
		Version:       version,
		Args:          cobra.ArbitraryArgs,
		RunE:          needSubcommand,
		SilenceErrors: true, // main prints them, with the verb
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cfg.addFlags(root.PersistentFlags())

	root.AddGroup(
		&cobra.Group{ID: groupSandboxes, Title: "Sandboxes:"},
		&cobra.Group{ID: groupSnapshots, Title: "Snapshots:"},
		&cobra.Group{ID: groupDaemon, Title: "The daemon and its images:"},
	)
	for _, c := range []*cobra.Command{
		newCreateCmd(cfg), newLsCmd(cfg), newExecCmd(cfg), newShellCmd(cfg), newCpCmd(cfg), newFSCmd(cfg), newKillCmd(cfg),
		newInfoCmd(cfg), newNetCmd(cfg), newExposeCmd(cfg), newPortsCmd(cfg), newUnexposeCmd(cfg),
		newPortForwardCmd(cfg), newPsCmd(cfg), newLogsCmd(cfg), newKillProcCmd(cfg), newStdinCmd(cfg), newWatchCmd(cfg),
		newPauseCmd(cfg), newResumeCmd(cfg), newCheckpointCmd(cfg), newCheckpointsCmd(cfg), newRollbackCmd(cfg),
		newStatsCmd(cfg),
	} {
		c.GroupID = groupSandboxes
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newSnapshotCmd(cfg), newSpawnCmd(cfg), newBranchCmd(cfg), newTemplateCmd(cfg)} {
		c.GroupID = groupSnapshots
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{
		newServeCmd(), newImageCmd(cfg), newMCPCmd(cfg), newVersionCmd(), newBenchCmd(cfg), newLoadtestCmd(cfg), newUsageCmd(cfg), newKeysCmd(cfg),
	} {
		c.GroupID = groupDaemon
		root.AddCommand(c)
	}
	keepLetterFlags(root)
	return root
}

// The groups root's help lists the verbs in.
const (
	groupSandboxes = "sandboxes"
	groupSnapshots = "snapshots"
	groupDaemon    = "daemon"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print cove's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd, err := newRootCmd().ExecuteContextC(ctx)
	stop()
	if err != nil {
		report(os.Stderr, cmd, err)
	}
	os.Exit(exitCode(err))
}
