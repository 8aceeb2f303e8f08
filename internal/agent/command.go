package agent

import (
	"context"
	"os/exec"
)

// command is what a call asks to run, resolved the one way every start
// (exec, streamed exec, background process, terminal) takes it: argv, its
// program found in the command's own PATH, working directory, the
// environment (defaults, the account's, then the call's: later entries
// win, as os/exec keeps the last of duplicate keys) and the account.
type command struct {
	prog string
	argv []string
	dir  string
	env  []string
	acct *account
}

// resolveCommand resolves argv, or shell run by /bin/sh -c, or with
// neither the account's login shell, as user in cwd with env on top of
// the defaults. A program that cannot be found is lookErr, which each
// caller reports its own way (exec as a shell would, with 127).
func (a *Agent) resolveCommand(argv []string, shell, cwd, user string, env []string) (c command, lookErr, err error) {
	if c.dir, err = a.execDir(cwd); err != nil {
		return c, nil, err
	}
	if c.acct, err = lookupUser(user); err != nil {
		return c, nil, err
	}
	c.env = append(append(defaultEnv(), c.acct.env()...), env...)
	path := envValue(c.env, "PATH")
	switch {
	case shell != "":
		c.argv = []string{"/bin/sh", "-c", shell}
	case len(argv) > 0:
		c.argv = argv
	default:
		c.argv = loginShell(path, c.dir)
	}
	c.prog, lookErr = lookPath(c.argv[0], path, c.dir)
	return c, lookErr, nil
}

// cmd is c as an exec.Cmd in its own process group (and the agent's
// cgroup for commands), run as c's account; killed when ctx ends, if ctx
// is not nil.
func (a *Agent) cmd(ctx context.Context, c command) *exec.Cmd {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, c.prog)
	} else {
		cmd = exec.Command(c.prog)
	}
	cmd.Args, cmd.Dir, cmd.Env = c.argv, c.dir, c.env
	cmd.SysProcAttr = a.procAttr()
	cmd.SysProcAttr.Credential = c.acct.credential()
	return cmd
}

// loginShell is the command a terminal runs when the request names none.
func loginShell(pathEnv, dir string) []string {
	if _, err := lookPath("bash", pathEnv, dir); err == nil {
		return []string{"bash", "-l"}
	}
	return []string{"/bin/sh", "-l"}
}
