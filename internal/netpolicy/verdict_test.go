package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestJudge covers each rule of a proxy verdict, in order: the ranges no
// policy opens, private ranges, deny CIDRs, then by name on 80 and 443 and
// by address elsewhere.
func TestJudge(t *testing.T) {
	g := &guard{
		deny:              []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}, // the daemon's listen address
		resolvablePrivate: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")},
		isHost:            func(a netip.Addr) bool { return a == netip.MustParseAddr("198.51.100.1") },
	}
	all := Policy{AllowCIDRs: []string{"0.0.0.0/0"}}
	domains := Policy{AllowDomains: []string{"allowed.test", "*.cdn.test"}, DenyDomains: []string{"bad.cdn.test"}}
	for _, tc := range []struct {
		name     string
		p        Policy
		dst      string
		host     string // Host or SNI
		admitted bool
		want     bool
		why      string // in the reason
	}{
		{"zero policy", Policy{}, "192.0.2.1:22", "", false, false, "neither"},
		{"zero policy, port 443", Policy{}, "192.0.2.1:443", "allowed.test", false, false, "not in allow_domains"},

		// Always denied, whatever the policy.
		{"loopback", Policy{AllowCIDRs: []string{"0.0.0.0/0", "127.0.0.0/8"}}, "127.0.0.1:7070", "", true, false, "always denied"},
		{"this network", all, "0.1.2.3:80", "", false, false, "always denied"},
		{"sandbox link", Policy{AllowCIDRs: []string{"10.77.0.0/16"}}, "10.77.0.1:15001", "", false, false, "always denied"},
		{"another sandbox's range", Policy{AllowCIDRs: []string{"10.0.0.0/8"}}, "10.77.3.2:22", "", false, false, "always denied"},
		{"host address", Policy{AllowCIDRs: []string{"198.51.100.0/24"}}, "198.51.100.1:22", "", false, false, "address of the host"},
		{"beside the host", Policy{AllowCIDRs: []string{"198.51.100.0/24"}}, "198.51.100.2:22", "", false, true, "allow_cidrs"},
		{"daemon listen address", all, "203.0.113.7:7070", "", true, false, "always denied"},
		{"metadata", Policy{AllowCIDRs: []string{"169.254.0.0/16"}}, "169.254.169.254:80", "", true, false, "always denied"},
		{"multicast", all, "224.0.0.251:5353", "", false, false, "always denied"},
		{"broadcast", all, "255.255.255.255:9", "", false, false, "always denied"},
		{"IPv6", Policy{AllowCIDRs: []string{"::/0"}}, "[2001:db8::1]:443", "allowed.test", true, false, "IPv6"},
		{"4in6 is IPv4", all, "[::ffff:192.0.2.1]:22", "", false, true, "allow_cidrs"},

		// Private ranges: only an allow CIDR inside the range, or a
		// resolved address in ResolvablePrivate.
		{"10/8 under 0/0", all, "10.1.2.3:22", "", false, false, "private"},
		{"172.16/12 under 0/0", all, "172.20.0.1:22", "", false, false, "private"},
		{"192.168/16 under 0/0", all, "192.168.1.1:80", "", false, false, "private"},
		{"100.64/10 under 0/0", all, "100.100.100.200:80", "", false, false, "private"},
		{"wider than the range", Policy{AllowCIDRs: []string{"8.0.0.0/6"}}, "10.1.2.3:22", "", false, false, "private"},
		{"the whole range", Policy{AllowCIDRs: []string{"10.0.0.0/8"}}, "10.1.2.3:22", "", false, true, "allow_cidrs"},
		{"inside the range", Policy{AllowCIDRs: []string{"172.16.5.0/24"}}, "172.16.5.9:22", "", false, true, "allow_cidrs"},
		{"inside, another address", Policy{AllowCIDRs: []string{"172.16.5.0/24"}}, "172.16.6.9:22", "", false, false, "private"},
		{"resolved in ResolvablePrivate", domains, "10.99.0.2:22", "", true, true, "resolved"},
		{"resolved outside ResolvablePrivate", domains, "10.98.0.2:22", "", true, false, "private"},
		{"resolved outside ResolvablePrivate, 0/0", Policy{AllowCIDRs: []string{"0.0.0.0/0"}, AllowDomains: []string{"allowed.test"}}, "192.168.0.2:443", "allowed.test", true, false, "private"},
		{"resolved in ResolvablePrivate, allowed SNI", domains, "10.99.0.2:443", "allowed.test", true, true, "allow_domains"},
		{"not resolved in ResolvablePrivate", domains, "10.99.0.2:22", "", false, false, "private"},

		// Deny CIDRs.
		{"deny CIDR", Policy{AllowCIDRs: []string{"0.0.0.0/0"}, DenyCIDRs: []string{"192.0.2.0/24"}}, "192.0.2.1:22", "", false, false, "deny_cidrs"},
		{"deny CIDR over a resolved name", Policy{AllowDomains: []string{"allowed.test"}, DenyCIDRs: []string{"192.0.2.0/24"}}, "192.0.2.1:443", "allowed.test", true, false, "deny_cidrs"},
		{"beside a deny CIDR", Policy{AllowCIDRs: []string{"0.0.0.0/0"}, DenyCIDRs: []string{"192.0.2.0/24"}}, "192.0.3.1:22", "", false, true, "allow_cidrs"},

		// Ports 80 and 443: by name.
		{"denied name in an allowed CIDR", Policy{AllowCIDRs: []string{"0.0.0.0/0"}, DenyDomains: []string{"bad.test"}}, "192.0.2.1:80", "bad.test", false, false, "deny_domains"},
		{"name both allowed and denied", domains, "192.0.2.1:443", "bad.cdn.test", true, false, "deny_domains"},
		{"allowed name, resolved", domains, "192.0.2.1:443", "allowed.test", true, true, "allow_domains"},
		{"allowed wildcard name, resolved", domains, "192.0.2.1:80", "a.b.cdn.test", true, true, "allow_domains"},
		{"allowed name, not resolved", domains, "192.0.2.1:443", "allowed.test", false, false, "not resolved"},
		{"allowed name in an allowed CIDR", Policy{AllowCIDRs: []string{"192.0.2.0/24"}, AllowDomains: []string{"allowed.test"}}, "192.0.2.1:443", "allowed.test", false, true, "allow_domains"},
		{"other name at a resolved address", domains, "192.0.2.1:443", "forbidden.test", true, false, "not in allow_domains"},
		{"other name in an allowed CIDR", Policy{AllowCIDRs: []string{"192.0.2.0/24"}}, "192.0.2.1:80", "forbidden.test", false, true, "allow_cidrs"},
		{"no name at a resolved address", domains, "192.0.2.1:443", "", true, false, "no name"},
		{"no name in an allowed CIDR", Policy{AllowCIDRs: []string{"192.0.2.0/24"}}, "192.0.2.1:443", "", false, true, "allow_cidrs"},

		// Other ports: by address.
		{"other port, resolved", domains, "192.0.2.1:22", "", true, true, "resolved"},
		{"other port, allowed CIDR", Policy{AllowCIDRs: []string{"192.0.2.0/24"}}, "192.0.2.1:5432", "", false, true, "allow_cidrs"},
		{"other port, neither", Policy{AllowCIDRs: []string{"192.0.2.0/24"}}, "192.0.3.1:5432", "", false, false, "neither"},
		{"other port ignores names", domains, "192.0.2.1:8443", "allowed.test", false, false, "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := compile(tc.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, why := g.judge(r, conn{dst: netip.MustParseAddrPort(tc.dst), name: tc.host, admitted: tc.admitted})
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("judge = %v (%s), want %v (%s)", got, why, tc.want, tc.why)
			}
		})
	}
}

// TestJudgeAddrAgreesWithJudge: the proxy refuses on the address alone
// before it reads a name, so every refusal there must be judge's too.
func TestJudgeAddrAgreesWithJudge(t *testing.T) {
	g := &guard{isHost: func(netip.Addr) bool { return false }}
	r, err := compile(Policy{AllowCIDRs: []string{"0.0.0.0/0"}, DenyCIDRs: []string{"192.0.2.0/24"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"127.0.0.1:443", "10.0.0.1:80", "192.0.2.1:443", "198.51.100.1:80", "[2001:db8::1]:443"} {
		ap := netip.MustParseAddrPort(dst)
		_, _, why := g.judgeAddr(r, ap.Addr().Unmap(), false)
		ok, _ := g.judge(r, conn{dst: ap, name: "x.test"})
		if (why != "") == ok {
			t.Errorf("%s: judgeAddr refuses %q, judge allows %v", dst, why, ok)
		}
	}
}

func TestHostAddrs(t *testing.T) {
	var h hostAddrs
	if !h.has(netip.MustParseAddr("127.0.0.1")) {
		t.Error("loopback is not an address of the host")
	}
	if h.has(netip.MustParseAddr("192.0.2.254")) {
		t.Error("a documentation address is an address of the host")
	}
}
