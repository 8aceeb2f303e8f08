package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Sandbox is a handle for data-plane calls, obtained with the sandbox's
// token: holding one is proof the caller may use the sandbox.
type Sandbox struct {
	s *Service
	b *box
}

// Open checks a sandbox's token and returns a handle for data-plane calls.
func (s *Service) Open(id, token string) (*Sandbox, error) {
	b, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("%w: sandbox %s needs its token in the X-Sandbox-Token header (it was returned when the sandbox was created)", ErrForbidden, id)
	}
	if !tokenMatches(b.rec.TokenHash, token) {
		return nil, fmt.Errorf("%w: wrong token for sandbox %s", ErrForbidden, id)
	}
	return &Sandbox{s: s, b: b}, nil
}

// ID returns the sandbox's id.
func (sb *Sandbox) ID() string { return sb.b.rec.ID }

// agent returns a connection to the sandbox's agent, reconnecting if the
// last one broke.
func (sb *Sandbox) agent(ctx context.Context) (*agentproto.Client, error) {
	b := sb.b
	if c, err := b.liveAgent(); c != nil || err != nil {
		return c, err
	}
	// Reconnect under connMu only: b.mu guards fields that the reaper and
	// List read, and must never wait on a slow dial.
	b.connMu.Lock()
	defer b.connMu.Unlock()
	if c, err := b.liveAgent(); c != nil || err != nil {
		return c, err // another call reconnected meanwhile
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := sb.s.connect(ctx, b.rec.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot reach the agent of sandbox %s: %v", ErrUnavailable, b.rec.ID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.Status != StatusRunning { // destroyed while we dialled
		c.Close()
		return nil, fmt.Errorf("sandbox %s is %s: %w", b.rec.ID, b.rec.Status, ErrNotFound)
	}
	b.agent = c
	return c, nil
}

// liveAgent returns the sandbox's working agent connection, nil if there
// is none, or an error if the sandbox is going away.
func (b *box) liveAgent() (*agentproto.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.Status != StatusRunning {
		return nil, fmt.Errorf("sandbox %s is %s: %w", b.rec.ID, b.rec.Status, ErrNotFound)
	}
	if b.agent != nil {
		select {
		case <-b.agent.Closed():
			b.agent = nil
		default:
			return b.agent, nil
		}
	}
	return nil, nil
}

// mapErr turns agent errors into the service's sentinels.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *agentproto.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case agentproto.CodeInvalid, agentproto.CodeIsDir:
			return fmt.Errorf("%w: %s", ErrInvalid, ae.Message)
		case agentproto.CodeNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, ae.Message)
		case agentproto.CodeTimeout:
			return fmt.Errorf("%w: %s", ErrTimeout, ae.Message)
		}
		return fmt.Errorf("agent: %s", ae.Message)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: agent connection: %v", ErrUnavailable, err)
}

// Ping checks that the agent answers and reports its round trip.
func (sb *Sandbox) Ping(ctx context.Context) (agentproto.PingResult, time.Duration, error) {
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.PingResult{}, 0, err
	}
	t0 := time.Now()
	r, err := a.Ping(ctx)
	return r, time.Since(t0), mapErr(err)
}

// Exec runs a command.
func (sb *Sandbox) Exec(ctx context.Context, req agentproto.ExecRequest) (agentproto.ExecResult, error) {
	if err := req.Validate(); err != nil {
		return agentproto.ExecResult{}, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.ExecResult{}, err
	}
	sb.s.stats.Execs.Add(1)
	r, err := a.Exec(ctx, req)
	return r, mapErr(err)
}

// Eval evaluates Python code in the sandbox's warm interpreter.
func (sb *Sandbox) Eval(ctx context.Context, req agentproto.EvalRequest) (agentproto.EvalResult, error) {
	if req.Code == "" {
		return agentproto.EvalResult{}, invalidf("code is empty")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.EvalResult{}, err
	}
	r, err := a.Eval(ctx, req)
	return r, mapErr(err)
}

// Put writes a file from r, atomically.
func (sb *Sandbox) Put(ctx context.Context, req agentproto.PutRequest, r io.Reader) (agentproto.FileInfo, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return agentproto.FileInfo{}, mapErr(err)
	}
	if req.Mode > 0o7777 {
		return agentproto.FileInfo{}, invalidf("mode %o is not a permission mode", req.Mode)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	info, err := a.Put(ctx, req, r)
	return info, mapErr(err)
}

// Get opens a file, or a range of it, for reading; the caller closes the
// reader, which yields req.Span(info.Size) bytes.
func (sb *Sandbox) Get(ctx context.Context, req agentproto.GetRequest) (agentproto.FileInfo, io.ReadCloser, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return agentproto.FileInfo{}, nil, mapErr(err)
	}
	if req.Offset < 0 || req.Length < 0 {
		return agentproto.FileInfo{}, nil, invalidf("offset and length must not be negative")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.FileInfo{}, nil, err
	}
	info, rc, err := a.Get(ctx, req)
	return info, rc, mapErr(err)
}

// List lists a directory tree.
func (sb *Sandbox) List(ctx context.Context, req agentproto.ListRequest) (agentproto.ListResult, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return agentproto.ListResult{}, mapErr(err)
	}
	if req.Depth < 0 || req.Depth > 64 {
		return agentproto.ListResult{}, invalidf("depth must be between 1 and 64")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.ListResult{}, err
	}
	r, err := a.List(ctx, req)
	return r, mapErr(err)
}

// Wait blocks until a file contains a text or the timeout elapses.
func (sb *Sandbox) Wait(ctx context.Context, req agentproto.WaitRequest) (agentproto.WaitResult, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return agentproto.WaitResult{}, mapErr(err)
	}
	if req.Text == "" {
		return agentproto.WaitResult{}, invalidf("text is empty")
	}
	if req.TimeoutMs < 0 {
		return agentproto.WaitResult{}, invalidf("timeout must not be negative")
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return agentproto.WaitResult{}, err
	}
	r, err := a.Wait(ctx, req)
	return r, mapErr(err)
}
