package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// errEvalTimeout is the cause of an eval context that ended by the
// request's own timeout.
var errEvalTimeout = errors.New("eval timeout")

// Eval runs Python code in the warm interpreter. Calls run one at a time.
func (a *Agent) Eval(ctx context.Context, req agentproto.EvalRequest) (agentproto.EvalResult, error) {
	var res agentproto.EvalResult
	if req.TimeoutMs < 0 {
		return res, agentproto.Errorf(agentproto.CodeInvalid, "timeout must not be negative")
	}
	if err := a.lockEval(ctx); err != nil {
		return res, err
	}
	defer a.unlockEval()

	p, lost, err := a.interpLocked()
	if err != nil {
		return res, err
	}
	if err := a.reseedIfDue(ctx, p); err != nil {
		return a.evalFailed(ctx, p, req, err)
	}
	// The timeout starts once the call has the interpreter, not while it
	// queues behind another.
	callCtx := ctx
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeoutCause(ctx, time.Duration(req.TimeoutMs)*time.Millisecond, errEvalTimeout)
		defer cancel()
	}
	resp, err := p.call(callCtx, interpRequest{Op: "eval", Code: req.Code, Limit: agentproto.MaxOutput})
	if err != nil {
		return a.evalFailed(ctx, p, req, err)
	}
	// Four fields share the answer's frame, so each gets MaxOutput once
	// escaped: see jsonFit.
	truncated := resp.Truncated
	for _, f := range []*string{&resp.Result, &resp.Error, &resp.Stdout, &resp.Stderr} {
		var cut bool
		*f, cut = jsonFit(*f, agentproto.MaxOutput)
		truncated = truncated || cut
	}
	res = agentproto.EvalResult{
		Result: resp.Result,
		Stdout: resp.Stdout,
		Stderr: resp.Stderr,
		Error:  resp.Error,
	}
	if lost {
		res.Stderr = "cove: the Python interpreter had exited since the last call; its state was lost\n" + res.Stderr
	}
	if truncated {
		res.Stderr += "\ncove: output was truncated\n"
	}
	if res.Error != "" {
		res.ExitCode = 1
	}
	return res, nil
}

// evalFailed handles a call that got no answer: the interpreter is dead or
// was killed, so it is dropped, and the result says that its state is gone.
// ExitCode is -1, as for a command killed by a signal.
func (a *Agent) evalFailed(ctx context.Context, p *interp, req agentproto.EvalRequest, err error) (agentproto.EvalResult, error) {
	p.kill()
	status := p.status()
	a.dropInterp(p)
	switch {
	case errors.Is(err, errEvalTimeout):
		a.log.Info("eval timed out; python interpreter killed", "timeout_ms", req.TimeoutMs)
		// Start the next interpreter now so the next call finds it warm.
		if _, _, err := a.interpLocked(); err != nil {
			a.log.Warn("restart python interpreter", "err", err)
		}
		return agentproto.EvalResult{
			Error:    fmt.Sprintf("eval timed out after %v: the Python interpreter was killed and restarted, so its state (variables, imports) is lost", time.Duration(req.TimeoutMs)*time.Millisecond),
			ExitCode: -1,
		}, nil
	case ctx.Err() != nil:
		a.log.Info("eval canceled; python interpreter killed")
		return agentproto.EvalResult{}, ctx.Err()
	case errors.Is(err, errInterpExited):
		a.log.Warn("python interpreter exited during eval", "status", status)
		msg := fmt.Sprintf("the Python interpreter exited during this call (%s); its state (variables, imports) is lost and the next call starts a fresh one", status)
		if tail := strings.TrimSpace(p.stderr.String()); tail != "" {
			msg += "\ninterpreter stderr:\n" + tail
		}
		return agentproto.EvalResult{Error: msg, ExitCode: -1}, nil
	default:
		return agentproto.EvalResult{}, fmt.Errorf("eval: %w", err)
	}
}

// Warm starts the interpreter if it is not running and waits until it
// answers, so that the first Eval does not pay for the start.
func (a *Agent) Warm(ctx context.Context) error {
	if err := a.lockEval(ctx); err != nil {
		return err
	}
	defer a.unlockEval()
	p, _, err := a.interpLocked()
	if errors.Is(err, errNotFound) {
		// An image without Python (imported, say) has nothing to warm;
		// eval in it says the interpreter is missing.
		a.log.Info("no python interpreter to warm", "python", a.python)
		primeForClones()
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := p.call(ctx, interpRequest{Op: "ping"}); err != nil {
		p.kill()
		a.dropInterp(p)
		return fmt.Errorf("warm python interpreter: %w", err)
	}
	primeForClones()
	return nil
}

// primeForClones readies, just before a snapshot is taken (Warm is the
// last call before it), what a clone's first calls would otherwise set up:
// the JSON codecs of their messages and a collected heap, so no GC cycle
// runs in them. Under TCG a clone translates each code path it runs anew
// (~8 µs a block); what is done here, its clones never run.
func primeForClones() {
	for _, v := range []any{
		&agentproto.RestoredRequest{}, &agentproto.PingResult{}, &agentproto.ExecRequest{}, &agentproto.ExecResult{},
		&agentproto.EvalRequest{}, &agentproto.EvalResult{}, &agentproto.PutRequest{}, &agentproto.GetRequest{},
		&agentproto.FileInfo{}, &agentproto.ListRequest{}, &agentproto.ListResult{}, &agentproto.WaitRequest{},
		&agentproto.WaitResult{},
	} {
		if b, err := json.Marshal(v); err == nil {
			json.Unmarshal(b, v)
		}
	}
	runtime.GC()
}

// reseedIfDue makes p reseed its random number generators if the sandbox
// was restored since it last ran code: clones of one snapshot would
// otherwise draw the same numbers. It is done here, before the next eval,
// rather than in Restored: under TCG waking the interpreter costs a new
// clone ~100 ms, which a sandbox that never evaluates Python need not
// pay. A fresh interpreter seeds itself; reseeding it is harmless. The
// caller holds evalSem.
func (a *Agent) reseedIfDue(ctx context.Context, p *interp) error {
	a.mu.Lock()
	due := a.reseed
	a.reseed = false
	a.mu.Unlock()
	if !due {
		return nil
	}
	// On failure the caller drops p, and its successor seeds itself.
	if _, err := p.call(ctx, interpRequest{Op: "reseed"}); err != nil {
		return fmt.Errorf("reseed python interpreter: %w", err)
	}
	return nil
}

func (a *Agent) lockEval(ctx context.Context) error {
	select {
	case a.evalSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Agent) unlockEval() { <-a.evalSem }

// interpLocked returns the running interpreter, starting one if needed.
// lost reports that the previous one had died between calls. The caller
// holds evalSem.
func (a *Agent) interpLocked() (p *interp, lost bool, err error) {
	a.mu.Lock()
	p, closed := a.py, a.closed
	a.mu.Unlock()
	if closed {
		return nil, false, agentproto.Errorf(agentproto.CodeInternal, "agent is shutting down")
	}
	if p != nil {
		if p.running() {
			return p, false, nil
		}
		a.log.Warn("python interpreter had exited", "status", p.status())
		p.kill() // closes its pipes
		lost = true
	}
	dir, err := a.execDir("")
	if err != nil {
		return nil, lost, err
	}
	python, err := lookPath(a.python, envValue(defaultEnv(), "PATH"), dir)
	if err != nil {
		return nil, lost, fmt.Errorf("python interpreter %q: %w", a.python, err)
	}
	p, err = startInterp(python, dir, defaultEnv(), a.procAttr())
	if err != nil {
		return nil, lost, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		p.kill()
		return nil, false, agentproto.Errorf(agentproto.CodeInternal, "agent is shutting down")
	}
	a.py = p
	a.mu.Unlock()
	a.log.Info("python interpreter started", "pid", p.cmd.Process.Pid)
	return p, lost, nil
}

// dropInterp forgets p if it is still the current interpreter.
func (a *Agent) dropInterp(p *interp) {
	a.mu.Lock()
	if a.py == p {
		a.py = nil
	}
	a.mu.Unlock()
}

// Restored implements agentproto.Handler: after a restore the sandbox has
// a new identity, and every clone of one snapshot starts with the same
// interpreter state, so the interpreter reseeds before its next eval.
func (a *Agent) Restored(ctx context.Context, req agentproto.RestoredRequest) error {
	// At debug level: the VM's console is a UART, slow under TCG, and
	// every clone would write this on its first call.
	a.log.Debug("restored from a snapshot", "sandbox", req.SandboxID)
	restoredFixups(a.log, a.urandom, req)
	a.mu.Lock()
	a.reseed = true
	a.mu.Unlock()
	return nil
}
