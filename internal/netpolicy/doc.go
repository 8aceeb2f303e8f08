// Package netpolicy is a sandbox's egress: the policy a user gives, the
// nftables rules in the sandbox's host-end namespace, and the resolver and
// transparent proxy the daemon runs there for it.
//
// Egress is done in user space, by the daemon, rather than by routing: the
// namespace holding the host end of a sandbox's link has no route to the
// host and never gets one, so a wrong or missing rule sends nothing
// anywhere. Its rules only redirect the guest's DNS to the daemon's
// resolver for that sandbox and every other TCP connection to the daemon's
// proxy for it, and drop the rest (UDP, ICMP, IPv6). Every connection is
// then judged in one place, the proxy, which recovers the original
// destination, reads the name a client asks for (HTTP Host, TLS SNI;
// TLS is never terminated) and dials the destination from the daemon's own
// namespace only if the policy allows it. The resolver answers only names
// the policy allows, forwards nothing else, and admits the addresses it
// returned for their TTL: a domain rule follows a CDN's addresses, while a
// name that shares an address with an allowed one is still judged by name.
package netpolicy
