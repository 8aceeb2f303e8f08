// Package testnet starts test servers in a network namespace of their own,
// joined to the host's namespace by a veth pair: HTTP, HTTPS with a CA made
// for the run, TCP and UDP echo, and a DNS server for a fixed zone that
// counts the queries it sees. The e2e suite and cove bench point sandboxes'
// egress at them, so that no network test sends a packet off the machine.
//
// The link takes a 10.99.K.0/24 that nothing on the host routes, chosen
// under a lock file per K so that concurrent runs on one machine never pick
// the same one.
package testnet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/proc"
)

// Ports every server address listens on.
const (
	HTTPPort  = 80
	HTTPSPort = 443
	EchoPort  = 7 // TCP and UDP
	DNSPort   = 53
)

// Names in the zone, and what they resolve to. Shared and Forbidden
// resolve to the allowed server's address: one name allowed and another
// denied on one address is what a CDN looks like.
const (
	AllowedName   = "allowed.test"   // → Allowed
	SharedName    = "shared.test"    // → Allowed
	ForbiddenName = "forbidden.test" // → Allowed
	OtherName     = "other.test"     // → Other
	WildName      = "a.wild.test"    // → Other, for "*.wild.test"
)

// Banner starts every answer of the HTTP and HTTPS servers:
// "cove-testnet ADDR host=HOST sni=SNI".
const Banner = "cove-testnet"

// TTL is the zone's answers' time to live, in seconds.
const TTL = 60

// Net is a running test network.
type Net struct {
	NS       string         // the servers' namespace
	Prefix   netip.Prefix   // the link's 10.99.K.0/24
	HostAddr netip.Addr     // the host's end of the link, .1
	Allowed  netip.Addr     // .2: HTTP, HTTPS, echo
	Other    netip.Addr     // .3: the same servers
	DNS      netip.AddrPort // .53:53, UDP and TCP
	CA       *CA            // signs the HTTPS servers' certificate

	hostLink string
	lock     *os.File
	log      *slog.Logger
	zone     map[string]netip.Addr

	mu      sync.Mutex
	queries map[string]int // by lower-case name without the final dot
	closers []func() error
}

// Config says how to name a Net's namespace.
type Config struct {
	// Base starts the namespace's name: Base<pid>-srv<K>. Namespaces of
	// this Base whose process is gone are deleted by Start.
	Base   string
	Logger *slog.Logger // nil: discard
}

// Start makes the namespace and its link and starts the servers. Close it.
func Start(ctx context.Context, cfg Config) (*Net, error) {
	if cfg.Base == "" || strings.ContainsAny(cfg.Base, "/ ") {
		return nil, fmt.Errorf("testnet: bad base name %q", cfg.Base)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	removeStale(ctx, cfg.Base, cfg.Logger)
	n := &Net{log: cfg.Logger, queries: make(map[string]int)}
	k, lock, err := claimSubnet(ctx)
	if err != nil {
		return nil, err
	}
	n.lock = lock
	n.Prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(k), 0}), 24)
	n.HostAddr = hostN(n.Prefix, 1)
	n.Allowed = hostN(n.Prefix, 2)
	n.Other = hostN(n.Prefix, 3)
	n.DNS = netip.AddrPortFrom(hostN(n.Prefix, 53), DNSPort)
	n.NS = fmt.Sprintf("%s%d-srv%d", cfg.Base, os.Getpid(), k)
	n.hostLink = fmt.Sprintf("cvtn%d", k)
	n.zone = map[string]netip.Addr{
		AllowedName: n.Allowed, SharedName: n.Allowed, ForbiddenName: n.Allowed,
		OtherName: n.Other, WildName: n.Other,
	}
	if n.CA, err = NewCA(); err == nil {
		err = n.link(ctx)
	}
	if err == nil {
		err = n.serve()
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	n.log.Debug("test network up", "ns", n.NS, "prefix", n.Prefix)
	return n, nil
}

func hostN(p netip.Prefix, i byte) netip.Addr {
	b := p.Addr().As4()
	b[3] = i
	return netip.AddrFrom4(b)
}

// Zone returns the names the DNS server answers and their addresses.
func (n *Net) Zone() map[string]netip.Addr {
	z := make(map[string]netip.Addr, len(n.zone))
	for k, v := range n.zone {
		z[k] = v
	}
	return z
}

// Queries returns how many queries (of any type) for name the DNS server
// has seen.
func (n *Net) Queries(name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.queries[strings.ToLower(strings.TrimSuffix(name, "."))]
}

// Close stops the servers and deletes the namespace, and the link with it.
func (n *Net) Close() error {
	var errs []error
	n.mu.Lock()
	closers := n.closers
	n.closers = nil
	n.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if n.NS != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// The namespace's own teardown is asynchronous: deleting the
		// pair first takes its host end at once.
		if _, err := net.InterfaceByName(n.hostLink); err == nil {
			errs = append(errs, netns.IP(ctx, "", nil, "link", "del", n.hostLink))
		}
		errs = append(errs, netns.Delete(ctx, n.NS))
		cancel()
	}
	if n.lock != nil {
		errs = append(errs, n.lock.Close()) // releases the subnet
	}
	return errors.Join(errs...)
}

func (n *Net) onClose(f func() error) {
	n.mu.Lock()
	n.closers = append(n.closers, f)
	n.mu.Unlock()
}

// link makes the namespace, with a veth pair whose host end has .1 and
// whose other end every server address.
func (n *Net) link(ctx context.Context) error {
	if err := netns.Add(ctx, n.NS); err != nil {
		return err
	}
	hostCIDR := netip.PrefixFrom(n.HostAddr, 24).String()
	steps := [][]string{
		{"", "link", "add", n.hostLink, "type", "veth", "peer", "name", "eth0", "netns", n.NS},
		{"", "addr", "add", hostCIDR, "dev", n.hostLink},
		{"", "link", "set", n.hostLink, "up"},
		{n.NS, "link", "set", "lo", "up"},
	}
	for _, a := range []netip.Addr{n.Allowed, n.Other, n.DNS.Addr()} {
		steps = append(steps, []string{n.NS, "addr", "add", netip.PrefixFrom(a, 24).String(), "dev", "eth0"})
	}
	steps = append(steps, []string{n.NS, "link", "set", "eth0", "up"})
	for _, s := range steps {
		if err := netns.IP(ctx, s[0], nil, s[1:]...); err != nil {
			return fmt.Errorf("testnet: %w", err)
		}
	}
	return nil
}

// removeStale deletes the namespaces of base whose process is gone (a run
// that was killed), so that their subnets are free again.
func removeStale(ctx context.Context, base string, log *slog.Logger) {
	ents, _ := os.ReadDir(netns.Dir)
	for _, e := range ents {
		pid, ok := stalePid(base, e.Name())
		if !ok || proc.Alive(pid) {
			continue
		}
		log.Info("removing a test network a dead run left", "ns", e.Name())
		if err := netns.Delete(ctx, e.Name()); err != nil {
			log.Warn("remove stale test network", "ns", e.Name(), "err", err)
		}
	}
}

// stalePid parses the pid from a namespace name Base<pid>-srv<K>.
func stalePid(base, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, base)
	if !ok {
		return 0, false
	}
	p, k, ok := strings.Cut(rest, "-srv")
	if !ok {
		return 0, false
	}
	if _, err := strconv.Atoi(k); err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

// lockDir holds one lock file per 10.99.K.0/24 in use by a test network.
const lockDir = "/run/lock"

// claimSubnet picks a K whose 10.99.K.0/24 no route of the host's
// namespace overlaps and locks it; closing the file releases it.
func claimSubnet(ctx context.Context) (int, *os.File, error) {
	routes, err := hostRoutes(ctx)
	if err != nil {
		return 0, nil, err
	}
	start := 20 + os.Getpid()%200
	for i := range 230 {
		k := 20 + (start-20+i)%230
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(k), 0}), 24)
		if overlapsAny(p, routes) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("cove-testnet-10.99.%d.lock", k)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("testnet: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		// Routes may have appeared while the lock was free.
		if routes, err = hostRoutes(ctx); err != nil || overlapsAny(p, routes) {
			f.Close()
			if err != nil {
				return 0, nil, err
			}
			continue
		}
		return k, f, nil
	}
	return 0, nil, errors.New("testnet: every 10.99.K.0/24 is in use")
}

func overlapsAny(p netip.Prefix, routes []netip.Prefix) bool {
	for _, r := range routes {
		if r.Overlaps(p) {
			return true
		}
	}
	return false
}

// hostRoutes returns the destinations of the host namespace's IPv4
// routes, in every table, but the default route.
func hostRoutes(ctx context.Context) ([]netip.Prefix, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-o", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("testnet: ip route: %w", err)
	}
	return parseRoutes(out)
}

// routeTypes are the words ip-route(8) may print before a destination.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true, "anycast": true,
	"unreachable": true, "blackhole": true, "prohibit": true, "throw": true, "nat": true,
}

// parseRoutes parses `ip -o -4 route show` lines into their destinations.
func parseRoutes(out []byte) ([]netip.Prefix, error) {
	var routes []netip.Prefix
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 1 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			return nil, fmt.Errorf("testnet: route %q: %w", sc.Text(), err)
		}
		routes = append(routes, p.Masked())
	}
	return routes, sc.Err()
}
