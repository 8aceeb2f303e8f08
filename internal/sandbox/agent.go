package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// awaitAgent waits for a new sandbox's agent to answer first.
func (s *Service) awaitAgent(ctx context.Context, b *box, first func(context.Context, *agentproto.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(delay*2, 20*time.Millisecond) {
		c, err := s.connectWith(ctx, b.rec.ID, first)
		if err == nil {
			b.attach(c)
			return nil
		}
		if errors.Is(err, runtime.ErrExited) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: agent did not answer within %s: %v", ErrUnavailable, s.cfg.StartTimeout, err)
		case <-time.After(delay):
		}
	}
}

// connect dials the agent and checks that it answers.
func (s *Service) connect(ctx context.Context, id string) (*agentproto.Client, error) {
	return s.connectWith(ctx, id, ping)
}

func ping(ctx context.Context, c *agentproto.Client) error {
	_, err := c.Ping(ctx)
	return err
}

// connectWith dials the agent and makes first its first call.
func (s *Service) connectWith(ctx context.Context, id string, first func(context.Context, *agentproto.Client) error) (*agentproto.Client, error) {
	conn, err := s.cfg.Runtime.Dial(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err := agentproto.NewClient(conn)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := first(pctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

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
		return nil, sb.fail(fmt.Errorf("%w: cannot reach the agent of sandbox %s: %v", ErrUnavailable, b.rec.ID, err))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil { // destroyed, or dead, while we dialled
		c.Close()
		return nil, err
	}
	b.attach(c)
	return c, nil
}

// liveAgent returns the sandbox's working agent connection, nil if there
// is none, or an error if calls may not go to the sandbox.
func (b *box) liveAgent() (*agentproto.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil {
		return nil, err
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
		case agentproto.CodeTooLarge:
			return fmt.Errorf("%w: %s", ErrTooLarge, ae.Message)
		case agentproto.CodeExists, agentproto.CodeNotEmpty:
			return fmt.Errorf("%w: %s", ErrConflict, ae.Message)
		}
		return fmt.Errorf("agent: %s", ae.Message)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, agentproto.ErrFrameTooLarge) {
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	}
	return fmt.Errorf("%w: agent connection: %v", ErrUnavailable, err)
}
