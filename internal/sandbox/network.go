package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/cove-sandbox/cove/internal/netpolicy"
)

// Network enforces sandboxes' egress policies in their host-side network
// namespaces (internal/netpolicy's Manager). With none, sandboxes have no
// network at all: no resolver, and nothing reaches past their link.
type Network interface {
	// Validate checks a policy; its error wraps netpolicy.ErrInvalid.
	Validate(p netpolicy.Policy) error
	// Attach applies p to sandbox id, whose host end is namespace ns. It
	// is idempotent: a restarted daemon attaches again.
	Attach(ctx context.Context, id, ns string, p netpolicy.Policy) error
	// Update changes the policy of an attached sandbox, at once for new
	// connections and queries; netpolicy.ErrNotAttached if it is not.
	Update(id string, p netpolicy.Policy) error
	// Detach lets go of what Attach made for id outside its namespace.
	Detach(id string)
}

// checkPolicy validates a policy a request gives (nil: none given). Its
// error wraps ErrInvalid and netpolicy.ErrInvalid.
func (s *Service) checkPolicy(p *netpolicy.Policy) error {
	switch {
	case p == nil:
		return nil
	case s.cfg.Network == nil && !p.IsZero():
		return fmt.Errorf("%w: %w: this daemon gives sandboxes no network, so it cannot allow any", ErrInvalid, netpolicy.ErrInvalid)
	case s.cfg.Network == nil:
		return nil
	}
	if err := s.cfg.Network.Validate(*p); err != nil {
		if errors.Is(err, netpolicy.ErrInvalid) {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return err
	}
	return nil
}

// policyOr is *p, or else def.
func policyOr(p *netpolicy.Policy, def netpolicy.Policy) netpolicy.Policy {
	if p != nil {
		return *p
	}
	return def
}

// samePolicy reports whether a and b say the same.
func samePolicy(a, b netpolicy.Policy) bool {
	return a.IsZero() && b.IsZero() || reflect.DeepEqual(a, b)
}

// encodePolicy is p as the store keeps it: "" for the zero policy.
func encodePolicy(p netpolicy.Policy) string {
	if p.IsZero() {
		return ""
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic("sandbox: marshal policy: " + err.Error()) // plain data; cannot fail
	}
	return string(b)
}

// decodePolicy reads a stored policy. One that does not decode denies
// everything, which is what the zero policy does.
func (s *Service) decodePolicy(owner, v string) netpolicy.Policy {
	var p netpolicy.Policy
	if v == "" {
		return p
	}
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		s.log.Warn("stored network policy does not decode; denying everything", "of", owner, "err", err)
		return netpolicy.Policy{}
	}
	return p
}

// attachNetwork applies b's policy in its host-side namespace.
func (s *Service) attachNetwork(ctx context.Context, b *box) error {
	if s.cfg.Network == nil {
		return nil
	}
	b.mu.Lock()
	p := b.net
	b.mu.Unlock()
	if err := s.cfg.Network.Attach(ctx, b.rec.ID, s.cfg.Runtime.Netns(b.rec.ID), p); err != nil {
		return fmt.Errorf("attach the network of sandbox %s: %w", b.rec.ID, err)
	}
	return nil
}

// applyPolicy makes p b's policy in its namespace, attaching it if it was
// not (a failed attach after a restart, say).
func (s *Service) applyPolicy(ctx context.Context, b *box, p netpolicy.Policy) error {
	if s.cfg.Network == nil {
		return nil
	}
	id := b.rec.ID
	err := s.cfg.Network.Update(id, p)
	if errors.Is(err, netpolicy.ErrNotAttached) {
		err = s.cfg.Network.Attach(ctx, id, s.cfg.Runtime.Netns(id), p)
	}
	if err != nil {
		return fmt.Errorf("apply the network policy of sandbox %s: %w", id, err)
	}
	return nil
}

// detachNetwork undoes attachNetwork; it is harmless for a sandbox never
// attached.
func (s *Service) detachNetwork(b *box) {
	if s.cfg.Network != nil {
		s.cfg.Network.Detach(b.rec.ID)
	}
}

// SetNetwork changes a running sandbox's egress policy, at once for new
// connections. An invalid policy is refused with an error that wraps
// ErrInvalid and netpolicy.ErrInvalid, and changes nothing.
func (s *Service) SetNetwork(ctx context.Context, id string, p netpolicy.Policy) (Info, error) {
	if err := s.checkPolicy(&p); err != nil {
		return Info{}, err
	}
	b, err := s.lookup(ctx, id)
	if err != nil {
		return Info{}, err
	}
	// Under netMu, a sandbox found usable is not torn down (detached)
	// before the change is made.
	b.netMu.Lock()
	defer b.netMu.Unlock()
	b.mu.Lock()
	old, uerr := b.net, b.usableLocked()
	b.mu.Unlock()
	if uerr != nil {
		return Info{}, uerr
	}
	if err := s.applyPolicy(ctx, b, p); err != nil {
		return Info{}, err
	}
	if err := s.cfg.Store.SetNetwork(ctx, id, encodePolicy(p)); err != nil {
		if rerr := s.applyPolicy(context.WithoutCancel(ctx), b, old); rerr != nil {
			s.log.Warn("restore a network policy the store refused", "id", id, "err", rerr)
		}
		return Info{}, err
	}
	b.setNetwork(p)
	s.log.Info("network policy changed", "id", id)
	return b.info(), nil
}

// setNetwork records p as b's policy, decoded and as the store keeps it.
func (b *box) setNetwork(p netpolicy.Policy) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.net = p
	b.rec.NetworkJSON = encodePolicy(p)
}
