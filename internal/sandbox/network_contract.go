package sandbox

import (
	"context"
	"fmt"
	"net"

	"github.com/cove-sandbox/cove/internal/netpolicy"
)

// Network is a sandbox's egress: *netpolicy.Manager satisfies it; nil in Config: sandboxes get
// no network at all.
type Network interface {
	Validate(p netpolicy.Policy) error
	Attach(ctx context.Context, id, ns string, p netpolicy.Policy) error
	Update(id string, p netpolicy.Policy) error
	Detach(id string)
}

// PortInfo is an exposed port.
type PortInfo struct {
	Port   int
	Public bool
	Token  string
}

// errContract is what the stubs answer until the service layer is merged.
var errContract = fmt.Errorf("%w: network: contract stub", ErrUnavailable)

// SetNetwork replaces a running sandbox's policy.
func (s *Service) SetNetwork(ctx context.Context, id string, p netpolicy.Policy) (Info, error) {
	if _, err := s.lookup(id); err != nil {
		return Info{}, err
	}
	return Info{}, errContract
}

// ExposePort exposes port; idempotent: the same token.
func (sb *Sandbox) ExposePort(ctx context.Context, port int, public bool) (PortInfo, error) {
	return PortInfo{}, errContract
}

// UnexposePort stops exposing port.
func (sb *Sandbox) UnexposePort(ctx context.Context, port int) error { return errContract }

// DialPort dials port in the sandbox.
func (sb *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) { return nil, errContract }

// Exposure is preview.Backend's.
func (s *Service) Exposure(id string, port int) (token string, public bool, err error) {
	return "", false, errContract
}

// DialPort is preview.Backend's.
func (s *Service) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, errContract
}
