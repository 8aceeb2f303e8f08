package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// PortInfo is an exposed port of a sandbox: reached through the daemon's
// preview proxy with its token, or by anyone if it is public.
type PortInfo struct {
	Port   int
	Public bool
	Token  string
}

func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return invalidf("port must be between 1 and 65535, got %d", port)
	}
	return nil
}

// portsLocked lists b's exposed ports in order. The caller holds b.mu.
func (b *box) portsLocked() []PortInfo {
	if len(b.ports) == 0 {
		return nil
	}
	out := make([]PortInfo, 0, len(b.ports))
	for _, p := range slices.Sorted(maps.Keys(b.ports)) {
		out = append(out, b.ports[p])
	}
	return out
}

// setPorts gives b the ports the store recorded for it.
func (b *box) setPorts(ps []store.Port) {
	if len(ps) == 0 {
		return
	}
	b.ports = make(map[int]PortInfo, len(ps))
	for _, p := range ps {
		b.ports[p.Port] = PortInfo(p)
	}
}

// portChange begins a change of port: it checks the port and the
// sandbox, takes b.netMu, which the caller releases, and returns what is
// exposed there.
func (sb *Sandbox) portChange(port int) (p PortInfo, ok bool, err error) {
	if err := checkPort(port); err != nil {
		return PortInfo{}, false, err
	}
	b := sb.b
	b.netMu.Lock()
	b.mu.Lock()
	p, ok = b.ports[port]
	err = b.usableLocked()
	b.mu.Unlock()
	if err != nil {
		b.netMu.Unlock()
		return PortInfo{}, false, err
	}
	return p, ok, nil
}

// ExposePort makes a port of the sandbox reachable through the preview
// proxy. Exposing it again keeps its token and sets whether it is public.
// The port goes when the sandbox does.
func (sb *Sandbox) ExposePort(ctx context.Context, port int, public bool) (PortInfo, error) {
	p, ok, err := sb.portChange(port)
	if err != nil {
		return PortInfo{}, err
	}
	b := sb.b
	defer b.netMu.Unlock()
	if !ok {
		p = PortInfo{Port: port, Token: randhex.New(16)}
	}
	p.Public = public
	if err := sb.s.cfg.Store.PutPort(ctx, b.rec.ID, store.Port(p)); err != nil {
		return PortInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil { // it died meanwhile: its row keeps the port until it goes
		return PortInfo{}, err
	}
	if b.ports == nil {
		b.ports = map[int]PortInfo{}
	}
	b.ports[port] = p
	return p, nil
}

// UnexposePort stops exposing a port; ErrNotFound if it is not exposed.
func (sb *Sandbox) UnexposePort(ctx context.Context, port int) error {
	_, ok, err := sb.portChange(port)
	if err != nil {
		return err
	}
	b := sb.b
	defer b.netMu.Unlock()
	if !ok {
		return fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, b.rec.ID, ErrNotFound)
	}
	if err := sb.s.cfg.Store.DeletePort(ctx, b.rec.ID, port); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.ports, port)
	b.mu.Unlock()
	return nil
}

// DialPort connects to a port of the sandbox, exposed or not: the caller
// holds its token.
func (sb *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := checkPort(port); err != nil {
		return nil, err
	}
	if err := sb.b.usable(); err != nil {
		return nil, err
	}
	return sb.s.dialPort(ctx, sb.b.rec.ID, port)
}

// Exposure says how an exposed port of a running sandbox may be reached:
// its token, and whether it is public. ErrNotFound if the sandbox is
// unknown or not running, or the port is not exposed; ErrRetry while a
// restarted daemon checks the sandbox.
//
// A port's own token (or its being public) is the credential, not an API
// key: the preview proxy asks with no principal, which sees every tenant's.
func (s *Service) Exposure(id string, port int) (token string, public bool, err error) {
	p, err := s.exposed(context.Background(), id, port)
	return p.Token, p.Public, err
}

// DialPort connects to an exposed port of a running sandbox; ErrNotFound
// as Exposure says. A paused auto_resume sandbox is resumed first: the
// resume is the sandbox's, not the dial's, so ctx's deadline (the caller's
// bound on reaching a port) does not cut it short, and the dial after it
// gets resumeDialTimeout of its own.
func (s *Service) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := s.exposed(ctx, id, port); err != nil {
		return nil, err
	}
	resumed, err := s.resumeForPort(context.WithoutCancel(ctx), id)
	if err != nil {
		return nil, err
	}
	if resumed {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), resumeDialTimeout)
		defer cancel()
	}
	return s.dialPort(ctx, id, port)
}

// resumeDialTimeout bounds the dial to a port of a sandbox just resumed.
const resumeDialTimeout = 10 * time.Second

func (s *Service) exposed(ctx context.Context, id string, port int) (PortInfo, error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return PortInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); errors.Is(err, ErrRetry) { // being checked after a restart
		return PortInfo{}, err
	} else if errors.Is(err, ErrPaused) && b.rec.AutoResume {
		// Its ports stay exposed; DialPort resumes it (pause.go).
	} else if err != nil {
		return PortInfo{}, fmt.Errorf("sandbox %s does not run: %w: %v", id, ErrNotFound, err)
	}
	p, ok := b.ports[port]
	if !ok && decodeLabels(b.rec.LabelsJSON)[LabelPublicPorts] == "true" {
		return PortInfo{Port: port, Public: true}, nil
	}
	if !ok {
		return PortInfo{}, fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, id, ErrNotFound)
	}
	return p, nil
}

// LabelPublicPorts: see apitype.LabelPublicPorts.
const LabelPublicPorts = apitype.LabelPublicPorts

// dialPort connects to the guest's port from the sandbox's host-side
// namespace: the daemon's own namespace has no route to any sandbox.
func (s *Service) dialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	c, err := s.dialIn(ctx, s.cfg.Runtime.Netns(id), net.JoinHostPort(netns.GuestIP, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("%w: port %d of sandbox %s: %v", ErrUnavailable, port, id, err)
	}
	return c, nil
}
