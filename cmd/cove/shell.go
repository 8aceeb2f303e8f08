package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newShellCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken, termName string
		opts                   client.TerminalOptions
		env                    = make(map[string]string)
	)
	cmd := &cobra.Command{
		Use:   "shell [flags] ID [-- CMD [ARG...]]",
		Short: "Open an interactive terminal in a sandbox",
		Long: `Open an interactive terminal in a sandbox: the user's login shell, or
CMD. The local terminal is put in raw mode for the session, so every key
(^C, ^Z, arrows) goes to the sandbox, and the remote window follows the
local one's size. cove exits with the command's exit status (128+N when
signal N ended it).

Without a local terminal (stdin piped) the input is sent as it comes,
followed by ^D at its end, on an 80x24 terminal.`,
		Example: `  cove shell $ID
  cove shell $ID --user user
  cove shell $ID -- python3`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeExec(cfg),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if at := cmd.ArgsLenAtDash(); at > 1 {
				return usageErrorf("a command goes after --: cove shell %s -- %s", id, strings.Join(args[1:], " "))
			}
			opts.Cmd = args[1:]
			opts.Env = env
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, id)
			if err != nil {
				return err
			}
			opts.Term = termName
			code, err := runShell(cmd.Context(), cl, id, tok, opts, cmd.InOrStdin(), cmd.OutOrStdout())
			if err != nil {
				return explain(notFoundIn(cmd.Context(), cl, err, id), daemon)
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	addSandboxTokenFlag(fs, &sandboxToken)
	fs.StringVar(&opts.User, "user", "", "run as this account, root or user (default: the sandbox's)")
	fs.StringVar(&opts.Cwd, "cwd", "", "working directory in the sandbox (default: /work)")
	fs.StringVar(&termName, "term", "", "TERM in the sandbox (default: the local $TERM on a terminal, else xterm-256color)")
	addEnvFlag(fs, env, "set an environment variable")
	return cmd
}

// runShell runs a terminal session between the local stdin and stdout
// and sandbox id, and returns the exit status cove should have.
func runShell(ctx context.Context, cl *client.Client, id, tok string, opts client.TerminalOptions, stdin io.Reader, stdout io.Writer) (int, error) {
	local := localTerminal(stdin, stdout)
	if local != nil {
		opts.Cols, opts.Rows = local.size()
		if opts.Term == "" {
			opts.Term = os.Getenv("TERM")
		}
	}
	s, err := cl.Terminal(ctx, id, tok, opts)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	if local != nil {
		restore, err := local.makeRaw()
		if err != nil {
			return 0, err
		}
		defer restore()
		defer local.followSize(s)()
	}
	go func() {
		_, err := io.Copy(s, stdin)
		if err == nil && local == nil {
			s.Write([]byte{4}) // ^D: the end of the input, for what reads it
		}
	}()
	if _, err := io.Copy(stdout, s); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}
	st, err := s.Wait()
	if err != nil {
		return 0, err
	}
	return shellExitCode(st), nil
}

// shellExitCode is the status a shell gives a command that ended so.
func shellExitCode(st apitype.ExitStatus) int {
	if st.Signal != "" {
		if sig := unix.SignalNum(st.Signal); sig != 0 {
			return 128 + int(sig)
		}
		return 255
	}
	if st.ExitCode < 0 || st.ExitCode > 255 {
		return 255
	}
	return st.ExitCode
}

// localTTY is the local terminal a session runs on: stdin's, with its size
// read from stdout if that is a terminal too.
type localTTY struct {
	in, size0 int // stdin's descriptor; the one to read the size from
}

// localTerminal returns the local terminal, or nil when stdin is not one.
func localTerminal(stdin io.Reader, stdout io.Writer) *localTTY {
	in, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return nil
	}
	t := &localTTY{in: int(in.Fd()), size0: int(in.Fd())}
	if out, ok := stdout.(*os.File); ok && term.IsTerminal(int(out.Fd())) {
		t.size0 = int(out.Fd())
	}
	return t
}

func (t *localTTY) size() (cols, rows int) {
	cols, rows, err := term.GetSize(t.size0)
	if err != nil || cols <= 0 || rows <= 0 {
		return apitype.DefaultTerminalCols, apitype.DefaultTerminalRows
	}
	return min(cols, 1000), min(rows, 1000)
}

// makeRaw puts the terminal in raw mode and returns what restores it.
func (t *localTTY) makeRaw() (func(), error) {
	old, err := term.MakeRaw(t.in)
	if err != nil {
		return nil, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	return func() { term.Restore(t.in, old) }, nil
}

// followSize sends the local size to s at every SIGWINCH, until the
// function it returns is called.
func (t *localTTY) followSize(s *client.TerminalSession) func() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				cols, rows := t.size()
				if err := s.Resize(cols, rows); err != nil && !errors.Is(err, context.Canceled) {
					return
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
