package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// maxStdin bounds what -i sends: stdin travels inside the JSON request.
const maxStdin = 64 << 20

func runExec(ctx context.Context, args []string) error {
	fs, c := newFlagSet("exec", "exec [flags] ID [--] CMD [ARG...]")
	c.addSandboxToken(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "kill the command after this long")
	cwd := fs.String("cwd", "", "working directory in the sandbox (default: /work)")
	shell := fs.Bool("shell", false, "join CMD and ARGs into one string run by /bin/sh -c")
	stdin := fs.Bool("i", false, "send cove's standard input to the command")
	env := make(map[string]string)
	fs.Func("e", "set an environment variable, `K=V` (K alone: copy it from here); repeatable", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if k == "" {
			return fmt.Errorf("want K=V, got %q", s)
		}
		if !ok {
			v = os.Getenv(k)
		}
		env[k] = v
		return nil
	})
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		fs.Usage()
		return errors.New("need a sandbox ID and a command")
	}
	id, argv := pos[0], pos[1:]

	req := apitype.ExecRequest{Cwd: *cwd, TimeoutSecs: timeout.Seconds()}
	if *shell {
		req.Shell = strings.Join(argv, " ")
	} else {
		req.Args = argv
	}
	if len(env) > 0 {
		req.Env = env
	}
	if *stdin {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxStdin+1))
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > maxStdin {
			return fmt.Errorf("stdin is over %s; copy it in with `cove cp - %s:FILE` instead", fmtBytes(maxStdin), id)
		}
		if !utf8.Valid(b) {
			return fmt.Errorf("stdin is not UTF-8 text, which exec can't carry; copy it in with `cove cp - %s:FILE` instead", id)
		}
		req.Stdin = string(b)
	}

	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	tok, err := c.tokenFor(daemon, id)
	if err != nil {
		return err
	}
	res, err := cl.Exec(ctx, id, tok, req)
	if err != nil {
		return explain(notFoundIn(ctx, cl, err, id), daemon)
	}
	if c.json {
		// The exit code is in the JSON; cove itself succeeded.
		return printJSON(os.Stdout, res)
	}
	os.Stdout.WriteString(res.Stdout)
	os.Stderr.WriteString(res.Stderr)
	if res.Truncated {
		fmt.Fprintln(os.Stderr, "cove exec: output truncated by the daemon")
	}
	code := res.ExitCode
	if res.TimedOut {
		fmt.Fprintf(os.Stderr, "cove exec: command timed out after %v\n", *timeout)
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
