// Command cove is the cove daemon and its command-line client.
//
//	cove serve                 run the daemon
//	cove image build           build the guest image
//	cove create|ls|exec|cp|kill|info|bench ...   talk to a running daemon
//	cove snapshot|spawn|branch ...               snapshots and their children
//	cove mcp                   MCP server over stdio, for Claude Code, Cursor, ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and writes its results to stdout.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is filled by each command's file in its init-free constructor
// below, so that the table is built once, not mutated at run time.
func commands() map[string]command {
	return map[string]command{
		"serve":    {"run the daemon", runServe},
		"image":    {"build and list guest images (image build|ls)", runImage},
		"create":   {"create sandboxes", runCreate},
		"ls":       {"list sandboxes", runLs},
		"exec":     {"run a command in a sandbox: cove exec ID -- CMD...", runExec},
		"cp":       {"copy a file into or out of a sandbox: cove cp SRC DST (ID:PATH on one side)", runCp},
		"kill":     {"destroy sandboxes", runKill},
		"snapshot": {"build, save, list and remove snapshots (snapshot build|save|ls|rm)", runSnapshot},
		"spawn":    {"start sandboxes from a snapshot: cove spawn TAG -n N", runSpawn},
		"branch":   {"snapshot a running sandbox, and start children from it: cove branch ID -n N", runBranch},
		"info":     {"show the daemon's backend, versions and limits", runInfo},
		"bench":    {"measure cove against its baselines, JSON out", runBench},
		"mcp":      {"serve cove's tools to an MCP client over stdio (COVE_URL, COVE_TOKEN)", runMCP},
		"version":  {"print the version", runVersion},
	}
}

// version is set at link time: -ldflags "-X main.version=..."
var version = "dev"

func usage() {
	fmt.Fprintf(os.Stderr, "usage: cove COMMAND [flags] [args]\n\ncommands:\n")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'cove COMMAND -h' for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		return
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "cove: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintf(os.Stderr, "cove %s: %v\n", name, err)
		os.Exit(1)
	}
}

// exitError makes cove exit with code without printing anything more, as
// `cove exec` does with the command's own exit code.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func runVersion(ctx context.Context, args []string) error {
	fmt.Println(version)
	return nil
}
