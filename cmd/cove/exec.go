package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// maxStdin bounds what -i sends: stdin travels inside the JSON request.
const maxStdin = 64 << 20

func newExecCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		timeout      time.Duration
		cwd, user    string
		shell, stdin bool
		asJSON       bool
		env          = make(map[string]string)
		bg           backgroundFlags
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [--] CMD [ARG...]",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox and print its output. cove exits with the
command's exit code (124 if it timed out).

Flags go before CMD, on either side of ID: the first argument after ID
that is not a flag starts the command, and all from there on is the
command's, as is all after "--".`,
		Example: `  cove exec $ID -- python3 -c 'print(1+1)'
  cove exec $ID ls -la /work
  cove exec --shell $ID 'cd /work && make test 2>&1 | tail'
  echo hi | cove exec -i $ID -- cat`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeExec(cfg),
		RunE: func(cmd *cobra.Command, args []string) error {
			args, err := execArgs(cmd, args)
			if err != nil || args == nil {
				return err
			}
			id, argv := args[0], args[1:]
			req := apitype.ExecRequest{Cwd: cwd, TimeoutSecs: timeout.Seconds(), User: user}
			if shell {
				req.Shell = strings.Join(argv, " ")
			} else {
				req.Args = argv
			}
			if len(env) > 0 {
				req.Env = env
			}
			if stdin {
				if req.Stdin, err = readStdin(cmd.InOrStdin(), id); err != nil {
					return err
				}
			}

			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			if bg.tag != "" && !bg.on {
				return usageErrorf("--tag names a background process: add --background")
			}
			if bg.on {
				return runBackground(cmd, cl, daemon, id, tok, req, bg, asJSON)
			}
			return runExec(cmd, execTarget{cl, daemon, id, tok}, req, asJSON, timeout)
		},
	}
	fs := cmd.Flags()
	// Flags stop at ID; execArgs parses those between ID and CMD.
	fs.SetInterspersed(false)
	addSandboxTokenFlag(fs, &sandboxToken)
	fs.DurationVar(&timeout, "timeout", 60*time.Second, "kill the command after this long")
	fs.StringVar(&cwd, "cwd", "", "working directory in the sandbox (default: /work)")
	fs.StringVar(&user, "user", "", "run as this account, root or user (default: the sandbox's)")
	fs.BoolVar(&shell, "shell", false, "join CMD and ARGs into one string run by /bin/sh -c")
	fs.BoolVarP(&stdin, "stdin", "i", false, "send cove's standard input to the command")
	addEnvFlag(fs, env, "set an environment variable")
	addOutputFlags(fs, &asJSON, nil, "")
	addBackgroundFlags(fs, &bg)
	return cmd
}

// execTarget is the sandbox an exec runs in, and how to reach it.
type execTarget struct {
	cl              *client.Client
	daemon, id, tok string
}

// runExec runs req and prints its output as the command produces it, or
// with asJSON the buffered answer, and returns the command's exit status
// as cove's.
func runExec(cmd *cobra.Command, to execTarget, req apitype.ExecRequest, asJSON bool, timeout time.Duration) error {
	ctx := cmd.Context()
	fail := func(err error) error { return explain(notFoundIn(ctx, to.cl, err, to.id), to.daemon) }
	if asJSON {
		res, err := to.cl.Exec(ctx, to.id, to.tok, req)
		if err != nil {
			return fail(err)
		}
		// The exit code is in the JSON; cove itself succeeded.
		return printJSON(cmd.OutOrStdout(), res)
	}
	st, err := to.cl.ExecStream(ctx, to.id, to.tok, req, cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		return fail(err)
	}
	return execStatus(cmd.ErrOrStderr(), st.ExitCode, st.TimedOut, timeout)
}

// execStatus returns a command's exit status as cove's.
func execStatus(stderr io.Writer, code int, timedOut bool, timeout time.Duration) error {
	if timedOut {
		fmt.Fprintf(stderr, "cove exec: command timed out after %v\n", timeout)
		code = 124 // as timeout(1) does
	}
	if code != 0 {
		if code < 0 || code > 255 {
			code = 255 // e.g. -1 for a signal; exit codes are a byte
		}
		return exitError{code}
	}
	return nil
}

// execArgs returns ID and CMD from exec's arguments, which cobra parsed
// up to the first that is not a flag: ID, unless a "--" came first. It
// parses the flags between ID and CMD. It returns nil args, and no error,
// when it has shown the help that a --help there asked for.
func execArgs(cmd *cobra.Command, args []string) ([]string, error) {
	if len(args) > 1 && cmd.ArgsLenAtDash() < 0 {
		fs := cmd.Flags()
		if err := fs.Parse(args[1:]); err != nil {
			return nil, cmd.FlagErrorFunc()(cmd, err)
		}
		if help, _ := fs.GetBool("help"); help {
			return nil, cmd.Help()
		}
		args = append([]string{args[0]}, fs.Args()...)
	}
	if len(args) < 2 {
		return nil, usageErrorf("need a sandbox ID and a command")
	}
	return args, nil
}

// readStdin reads what -i sends, for sandbox id.
func readStdin(r io.Reader, id string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > maxStdin {
		return "", fmt.Errorf("stdin is over %s; copy it in with `cove cp - %s:FILE` instead", humanize.IBytes(maxStdin), id)
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("stdin is not UTF-8 text, which exec can't carry; copy it in with `cove cp - %s:FILE` instead", id)
	}
	return string(b), nil
}

// completeExec completes the sandbox ID, then leaves the command's
// arguments to the shell.
func completeExec(cfg *clientConfig) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return cfg.sandboxIDs(cmd.Context(), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
	}
}
