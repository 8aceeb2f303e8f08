package main

// Background processes: exec --background, ps, logs, kill-proc, stdin.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// backgroundFlags are exec's flags for a background process.
type backgroundFlags struct {
	on  bool
	tag string
}

func addBackgroundFlags(fs *pflag.FlagSet, bg *backgroundFlags) {
	fs.BoolVar(&bg.on, "background", false, "start CMD as a background process and print its pid at once (see cove ps, logs, kill-proc)")
	fs.StringVar(&bg.tag, "tag", "", "with --background: a name for the process, usable wherever a pid is")
}

// runBackground starts req as a background process and prints its pid
// (and tag), or with asJSON the process. exec's --timeout applies only if
// given: a background process runs until it ends or is killed.
func runBackground(cmd *cobra.Command, cl *client.Client, daemon, id, tok string, req apitype.ExecRequest, bg backgroundFlags, asJSON bool) error {
	if req.Stdin != "" {
		return usageErrorf("--background takes no -i: write stdin with `cove stdin %s PID`", id)
	}
	if !cmd.Flags().Changed("timeout") {
		req.TimeoutSecs = 0
	}
	req.Tag = bg.tag
	ctx := cmd.Context()
	p, err := cl.StartProcess(ctx, id, tok, req)
	if err != nil {
		return explain(notFoundIn(ctx, cl, err, id), daemon)
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), p)
	}
	if p.Tag != "" {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "%d %s\n", p.Pid, p.Tag)
		return err
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), p.Pid)
	return err
}

// procCommand is the shape of the verbs below: ID and PID|TAG, then what
// run does with a client for the sandbox.
func procCommand(cfg *clientConfig, use, short, long, example string, minArgs, maxArgs int, run func(cmd *cobra.Command, c procCall, args []string) error) *cobra.Command {
	var sandboxToken string
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Example: example,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < minArgs || len(args) > maxArgs {
				return usageErrorf("want %s", strings.TrimPrefix(use, strings.Fields(use)[0]+" "))
			}
			return nil
		},
		ValidArgsFunction: completeExec(cfg),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, args[0])
			if err != nil {
				return err
			}
			c := procCall{cl: cl, daemon: daemon, id: args[0], tok: tok, ctx: cmd.Context()}
			return c.explain(run(cmd, c, args[1:]))
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	return cmd
}

// procCall is a call about sandbox id's processes.
type procCall struct {
	cl     *client.Client
	daemon string
	id     string
	tok    string
	ctx    context.Context
}

func (c procCall) explain(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(exitError); ok {
		return err
	}
	return explain(notFoundIn(c.ctx, c.cl, err, c.id), c.daemon)
}

func newPsCmd(cfg *clientConfig) *cobra.Command {
	var all, asJSON bool
	cmd := procCommand(cfg, "ps [flags] ID", "List a sandbox's background processes",
		`List the background processes cove started in a sandbox (exec --background),
running and recently exited, with their status and output size; with
--all, the sandbox's other processes too.`,
		"  cove ps $ID\n  cove ps --all $ID", 1, 1,
		func(cmd *cobra.Command, c procCall, _ []string) error {
			procs, err := c.cl.Processes(c.ctx, c.id, c.tok, all)
			if err != nil {
				return err
			}
			return printList(cmd.OutOrStdout(), asJSON, false, procs, nil, printProcesses)
		})
	cmd.Flags().BoolVar(&all, "all", false, "list the sandbox's other processes too")
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

func printProcesses(w io.Writer, procs []apitype.ProcessInfo) error {
	t := newTable(w)
	fmt.Fprintln(t, "PID\tTAG\tSTATUS\tUSER\tSTARTED\tOUTPUT\tCMD")
	for _, p := range procs {
		status := p.Status
		switch {
		case !p.Cove:
			status = "-"
		case p.Exit != nil && p.Exit.Signal != "":
			status = "exited " + p.Exit.Signal
		case p.Exit != nil:
			status = "exited " + strconv.Itoa(p.Exit.ExitCode)
		}
		started, output := "-", "-"
		if p.StartedAt != nil {
			started = fmtDuration(time.Since(*p.StartedAt)) + " ago"
		}
		if p.Cove {
			output = strconv.FormatInt(p.OutputSize, 10)
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Pid, orDash(p.Tag), status, orDash(p.User), started, output, strings.Join(p.Cmd, " "))
	}
	return t.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newLogsCmd(cfg *clientConfig) *cobra.Command {
	var (
		follow bool
		offset int64
	)
	cmd := procCommand(cfg, "logs [flags] ID PID|TAG", "Print a background process's output",
		`Print a background process's output, stdout to stdout and stderr to
stderr, from --offset (bytes of both counted together). With -f, follow it
as it is produced and exit with the process's exit code when it ends.`,
		"  cove logs $ID web\n  cove logs -f $ID 1234", 2, 2,
		func(cmd *cobra.Command, c procCall, args []string) error {
			return printLogs(cmd, c, args[0], offset, follow)
		})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the process ends")
	cmd.Flags().Int64Var(&offset, "offset", 0, "start at this byte of the output")
	return cmd
}

func printLogs(cmd *cobra.Command, c procCall, ref string, offset int64, follow bool) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	write := func(ev apitype.OutputEvent) {
		if ev.Lost > 0 {
			fmt.Fprintf(stderr, "cove logs: %d bytes of output were lost before offset %d (the process's ring holds its latest output only)\n", ev.Lost, ev.Offset)
		}
		if ev.Stream == "stderr" {
			stderr.Write(ev.Bytes())
		} else {
			stdout.Write(ev.Bytes())
		}
	}
	if !follow {
		for {
			out, err := c.cl.ProcessOutput(c.ctx, c.id, c.tok, ref, offset, 0)
			if err != nil {
				return err
			}
			write(apitype.OutputEvent{Lost: out.Lost, Offset: out.Offset})
			for _, ch := range out.Chunks {
				write(ch)
			}
			if len(out.Chunks) == 0 || out.NextOffset == offset {
				return nil
			}
			offset = out.NextOffset
		}
	}
	var exit *apitype.ExitStatus
	err := c.cl.FollowOutput(c.ctx, c.id, c.tok, ref, offset, func(ev apitype.OutputEvent) error {
		write(ev)
		if ev.Exit != nil {
			exit = ev.Exit
		}
		return nil
	})
	if err != nil {
		return err
	}
	return exitOf(exit)
}

// exitOf is cove's exit status for a process that ended with e.
func exitOf(e *apitype.ExitStatus) error {
	if e == nil || e.ExitCode == 0 && e.Signal == "" {
		return nil
	}
	code := e.ExitCode
	if code < 0 || code > 255 {
		code = 255
	}
	if e.Signal != "" {
		code = 128 + signalNumber(e.Signal) // as a shell reports it
	}
	return exitError{code}
}

// signalNumber is the number of a few signals by name, 0 for others.
func signalNumber(name string) int {
	n := map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGUSR1": 10, "SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15}[name]
	return n
}

func newKillProcCmd(cfg *clientConfig) *cobra.Command {
	return procCommand(cfg, "kill-proc [flags] ID PID|TAG [SIG]", "Send a signal to a background process",
		`Send a signal (default TERM) to a background process's process group:
a name (TERM, SIGKILL, INT) or a number. A process that has exited is an
error.`,
		"  cove kill-proc $ID web\n  cove kill-proc $ID 1234 KILL", 2, 3,
		func(cmd *cobra.Command, c procCall, args []string) error {
			sig := "TERM"
			if len(args) > 1 {
				sig = args[1]
			}
			_, err := c.cl.Signal(c.ctx, c.id, c.tok, args[0], sig)
			return err
		})
}

func newStdinCmd(cfg *clientConfig) *cobra.Command {
	var closeAfter bool
	cmd := procCommand(cfg, "stdin [flags] ID PID|TAG", "Send cove's standard input to a background process",
		`Copy cove's standard input, as it arrives, to a background process's
stdin; with --close, close the process's stdin at the end of it.`,
		"  echo hello | cove stdin $ID cat\n  cove stdin --close $ID 1234 < input.txt", 2, 2,
		func(cmd *cobra.Command, c procCall, args []string) error {
			_, err := c.cl.WriteStdin(c.ctx, c.id, c.tok, args[0], cmd.InOrStdin(), closeAfter)
			return err
		})
	cmd.Flags().BoolVar(&closeAfter, "close", false, "close the process's stdin after the input")
	return cmd
}
