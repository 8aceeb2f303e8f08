package netpolicy

import "net/netip"

// alwaysDenied are ranges no policy opens: this host's loopback and
// "this network", every sandbox's own link, link-local (cloud metadata
// services), multicast and the reserved block with the broadcast address.
var alwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("10.77.0.0/16"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// privateRanges are opened only by an allow CIDR inside the range, or for an
// address an allowed name resolved to within Config.ResolvablePrivate.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

// guard is what a verdict needs beside a sandbox's rules: the ranges no
// policy opens, and the host's own addresses.
type guard struct {
	deny              []netip.Prefix // Config.Deny and the upstream resolvers
	resolvablePrivate []netip.Prefix
	isHost            func(netip.Addr) bool // an address of the daemon's namespace
}

// conn is a connection the proxy judges.
type conn struct {
	dst netip.AddrPort
	// name is the HTTP Host (port 80) or TLS SNI (port 443) the client
	// sent, normalized; "" if none, or an IP literal.
	name string
	// admitted says the resolver answered dst for an allowed name, within
	// its TTL and grace.
	admitted bool
}

// Destination ports whose connections are judged by the name they ask for.
const (
	portHTTP  = 80
	portHTTPS = 443
)

// judge decides whether c may be dialled, and why (for the debug log).
func (g *guard) judge(r *rules, c conn) (allow bool, why string) {
	a := c.dst.Addr().Unmap()
	cidr, admitted, why := g.judgeAddr(r, a, c.admitted)
	if why != "" {
		return false, why
	}
	if p := c.dst.Port(); p == portHTTP || p == portHTTPS {
		switch {
		case r.denyDomains.match(c.name):
			return false, "name in deny_domains"
		case r.allowDomains.match(c.name):
			if admitted || cidr {
				return true, "name in allow_domains"
			}
			return false, "name in allow_domains, but not resolved to this address"
		case cidr:
			return true, "address in allow_cidrs"
		case c.name == "":
			return false, "no name, and address not in allow_cidrs"
		}
		return false, "name not in allow_domains, and address not in allow_cidrs"
	}
	switch {
	case cidr:
		return true, "address in allow_cidrs"
	case admitted:
		return true, "address resolved for an allowed name"
	}
	return false, "address neither in allow_cidrs nor resolved for an allowed name"
}

// judgeAddr is the part of a verdict that needs only the address: a reason
// to refuse it whatever the name, or whether an allow CIDR covers it and
// whether its admission by the resolver counts.
func (g *guard) judgeAddr(r *rules, a netip.Addr, admitted bool) (cidr, admittedOK bool, why string) {
	switch {
	case !a.Is4():
		return false, false, "no IPv6 path"
	case containsAddr(alwaysDenied, a), containsAddr(g.deny, a):
		return false, false, "always denied"
	case g.isHost != nil && g.isHost(a):
		return false, false, "an address of the host"
	}
	cidr = r.allowsCIDR(a)
	if _, ok := privateRange(a); ok {
		admitted = admitted && containsAddr(g.resolvablePrivate, a)
		if !cidr && !admitted {
			return false, false, "private range not opened by an allow CIDR inside it"
		}
	}
	if containsAddr(r.deny, a) {
		return false, false, "address in deny_cidrs"
	}
	return cidr, admitted, ""
}

// allowsCIDR reports whether an allow CIDR covers a. In a private range
// only a CIDR lying inside that range counts, so a broad allow such as
// 0.0.0.0/0 never opens the networks beside the host.
func (r *rules) allowsCIDR(a netip.Addr) bool {
	priv, isPriv := privateRange(a)
	for _, p := range r.allow {
		if !p.Contains(a) {
			continue
		}
		if !isPriv || p.Bits() >= priv.Bits() && priv.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// privateRange is the private range holding a, if any.
func privateRange(a netip.Addr) (netip.Prefix, bool) {
	for _, p := range privateRanges {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
