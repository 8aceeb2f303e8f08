package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// ExecStatus is how a streamed exec ended. ExitCode is -1 when a signal
// ended the command; Signal names it ("SIGKILL").
type ExecStatus struct {
	ExitCode int
	Signal   string
	TimedOut bool
	Duration time.Duration
}

// outputError is an error of the caller's output function, returned as it
// is: it says nothing about the sandbox.
type outputError struct{ err error }

func (e *outputError) Error() string { return e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

// ExecStream runs a command like Exec, but calls out with each piece of
// its output ("stdout" or "stderr") as it is produced, with no cap. A
// slow out slows the command; an error from out ends the call, kills the
// command's process group in the sandbox, and is returned as it is.
func (sb *Sandbox) ExecStream(ctx context.Context, req ExecRequest, out func(stream string, p []byte) error) (ExecStatus, error) {
	a, preq, err := sb.execStart(ctx, req)
	if err != nil {
		return ExecStatus{}, err
	}
	r, err := a.ExecStream(ctx, preq, func(stream byte, p []byte) error {
		if err := out(agentproto.StreamName(stream), p); err != nil {
			return &outputError{err}
		}
		return nil
	})
	if oe := (*outputError)(nil); errors.As(err, &oe) {
		return ExecStatus{}, oe.err
	}
	if err != nil {
		return ExecStatus{}, sb.fail(err)
	}
	return ExecStatus{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, Duration: time.Duration(r.DurationMs) * time.Millisecond}, nil
}

// execStart is what every exec does before its call: the sandbox's
// defaults, the request checked, the agent reached, the exec counted.
func (sb *Sandbox) execStart(ctx context.Context, req ExecRequest) (*agentproto.Client, agentproto.ExecRequest, error) {
	req.User, req.Cwd, req.Env = sb.b.runDefaults(req.User, req.Cwd, req.Env)
	preq := req.proto()
	if err := preq.Validate(); err != nil {
		return nil, preq, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return nil, preq, err
	}
	sb.s.stats.Execs.Add(1)
	sb.s.cfg.Meter.Exec(sb.b.rec.ID)
	return a, preq, nil
}
