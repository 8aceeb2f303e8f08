package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/cove-sandbox/cove/internal/netns"
)

// Config is the daemon's side of every sandbox's egress.
type Config struct {
	Upstream          []string          // DNS servers "ip:port"; empty: the nameservers of /etc/resolv.conf
	Presets           map[string]Policy // named policies a Policy's Presets refer to
	Deny              []netip.Prefix    // more always-denied ranges (the daemon passes its listen addresses)
	ResolvablePrivate []netip.Prefix    // private ranges allowed names may resolve into (none by default)
	Logger            *slog.Logger
}

const (
	// maxAdmitted bounds a sandbox's admitted (address, name) pairs.
	maxAdmitted = 4096
	// maxDNSInFlight bounds a sandbox's exchanges with the upstream.
	maxDNSInFlight = 64
	// maxDNSConns bounds a sandbox's DNS-over-TCP connections.
	maxDNSConns = 32
)

// Manager runs the egress of every attached sandbox.
type Manager struct {
	upstream []string
	presets  map[string]Policy
	guard    *guard
	log      *slog.Logger

	ops sync.Mutex // serializes Attach, Detach and Close

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    bool
}

// New checks cfg and returns a Manager with no sandbox attached.
func New(cfg Config) (*Manager, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := checkPresets(cfg.Presets); err != nil {
		return nil, err
	}
	upstream, err := upstreams(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	if len(upstream) == 0 {
		log.Warn("netpolicy: no upstream DNS server: sandboxes' queries for allowed names will fail")
	}
	deny := append([]netip.Prefix(nil), cfg.Deny...)
	for _, up := range upstream {
		// A sandbox reaches DNS only through its own resolver.
		a := netip.MustParseAddrPort(up).Addr().Unmap()
		deny = append(deny, netip.PrefixFrom(a, a.BitLen()))
	}
	hosts := &hostAddrs{}
	return &Manager{
		upstream: upstream,
		presets:  maps.Clone(cfg.Presets),
		guard:    &guard{deny: deny, resolvablePrivate: cfg.ResolvablePrivate, isHost: hosts.has},
		log:      log,

		sandboxes: map[string]*sandbox{},
	}, nil
}

// upstreams checks the configured servers, or reads resolv.conf's.
func upstreams(list []string) ([]string, error) {
	if len(list) == 0 {
		conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, nil
		}
		for _, s := range conf.Servers {
			list = append(list, net.JoinHostPort(s, conf.Port))
		}
	}
	var out []string
	for _, s := range list {
		ap, err := netip.ParseAddrPort(s)
		if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
			return nil, fmt.Errorf("DNS upstream %q: want ip:port", s)
		}
		out = append(out, ap.String())
	}
	return out, nil
}

// Validate checks p, presets included; the error wraps ErrInvalid.
func (m *Manager) Validate(p Policy) error {
	_, err := compile(p, m.presets)
	return err
}

// Attach applies p to sandbox id, whose host-end namespace is ns: it
// replaces cove's rules there and starts the sandbox's resolver and proxy.
// Attaching again replaces the listeners and the rules (a restarted daemon
// re-attaches every sandbox); an invalid p changes nothing.
func (m *Manager) Attach(ctx context.Context, id, ns string, p Policy) error {
	r, err := compile(p, m.presets)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.ops.Lock()
	defer m.ops.Unlock()
	m.mu.Lock()
	closed, old := m.closed, m.sandboxes[id]
	m.mu.Unlock()
	if closed {
		return errors.New("netpolicy: manager closed")
	}
	if !netns.Exists(ns) {
		return fmt.Errorf("netns %s does not exist", ns)
	}
	if err := installRules(ns); err != nil {
		return err
	}
	adm := newAdmitted(maxAdmitted)
	if old != nil {
		m.detach(id)
		if old.ns == ns {
			adm = old.admitted
			adm.retain(r.nameAllowed)
		}
	}
	sb := &sandbox{id: id, ns: ns, admitted: adm}
	sb.rules.Store(r)
	if err := m.start(sb); err != nil {
		return fmt.Errorf("netpolicy: attach %s: %w", id, err)
	}
	m.mu.Lock()
	m.sandboxes[id] = sb
	m.mu.Unlock()
	return nil
}

// Update applies p to an attached sandbox at once: new connections and
// queries are judged by it, and what the resolver admitted for names it no
// longer allows is forgotten. Open connections are left alone.
func (m *Manager) Update(id string, p Policy) error {
	r, err := compile(p, m.presets)
	if err != nil {
		return err
	}
	m.mu.Lock()
	sb := m.sandboxes[id]
	m.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("%w: %s", ErrNotAttached, id)
	}
	sb.rules.Store(r)
	sb.admitted.retain(r.nameAllowed)
	return nil
}

// Detach stops sandbox id's resolver and proxy and closes its open
// connections. Its rules stay with its namespace, refusing what they
// redirect, until the namespace is deleted.
func (m *Manager) Detach(id string) {
	m.ops.Lock()
	defer m.ops.Unlock()
	m.detach(id)
}

func (m *Manager) detach(id string) {
	m.mu.Lock()
	sb := m.sandboxes[id]
	delete(m.sandboxes, id)
	m.mu.Unlock()
	if sb != nil {
		sb.stop()
	}
}

// Close detaches every sandbox; Attach fails after it.
func (m *Manager) Close() error {
	m.ops.Lock()
	defer m.ops.Unlock()
	m.mu.Lock()
	m.closed = true
	ids := make([]string, 0, len(m.sandboxes))
	for id := range m.sandboxes {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.detach(id)
	}
	return nil
}

// hostAddrs are the addresses of the daemon's namespace, which no sandbox
// reaches, read again when they are a few seconds old.
type hostAddrs struct {
	mu    sync.Mutex
	at    time.Time
	addrs map[netip.Addr]bool
}

const hostAddrsAge = 5 * time.Second

func (h *hostAddrs) has(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); h.addrs == nil || now.Sub(h.at) > hostAddrsAge {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			h.addrs, h.at = map[netip.Addr]bool{}, now
			for _, ia := range addrs {
				if ipn, ok := ia.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
						h.addrs[ip.Unmap()] = true
					}
				}
			}
		}
	}
	// Never read: refuse every address rather than miss the host's.
	return h.addrs == nil || h.addrs[a]
}
