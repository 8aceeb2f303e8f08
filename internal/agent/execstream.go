package agent

import (
	"context"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// ExecStream runs a command like Exec, but sends its output to out as it
// is produced, with no cap: the pipes are read only as fast as out takes
// the chunks, so a slow host slows the command rather than filling the
// agent's memory. Ending ctx (the host closing the stream) kills the
// command's process group.
func (a *Agent) ExecStream(ctx context.Context, req agentproto.ExecRequest, out *agentproto.ExecOutput) (agentproto.ExecStatus, error) {
	c, notRun, err := a.newExecCmd(ctx, req)
	if err != nil {
		return agentproto.ExecStatus{}, err
	}
	if notRun == nil {
		defer c.cancel()
		notRun, err = c.run(out.Writer(agentproto.Stdout), out.Writer(agentproto.Stderr), out.Start)
		if err != nil {
			return agentproto.ExecStatus{}, err
		}
	}
	if notRun != nil {
		// Reported as a shell would: the message on stderr, 126 or 127.
		out.Writer(agentproto.Stderr).Write([]byte(notRun.Stderr))
		return agentproto.ExecStatus{ExitCode: notRun.ExitCode, DurationMs: notRun.DurationMs}, nil
	}
	out.Freeze()
	st := c.status()
	a.log.Debug("exec stream", "argv", c.Args, "exit", st.ExitCode, "signal", st.Signal, "timed_out", st.TimedOut, "ms", st.DurationMs)
	return st, nil
}
