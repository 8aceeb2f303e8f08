package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

const (
	// upstreamTimeout bounds one exchange with one upstream server.
	upstreamTimeout = 2 * time.Second
	// maxTTL caps the TTL the guest is told and its addresses are admitted
	// for, so that neither outlives the other by long.
	maxTTL = 10 * time.Minute
	// admitGrace is how long past its TTL an answer's addresses stay
	// admitted: a client connects a little after it resolves.
	admitGrace = time.Minute
	// maxAnswers bounds the addresses one answer admits.
	maxAnswers = 32
	// maxChain bounds the CNAME chain followed to the final addresses.
	maxChain = 8
	// udpSize is the largest answer over UDP, whatever the client offers
	// (the DNS flag day's size, which avoids fragments).
	udpSize = 1232
)

// resolver answers one sandbox's DNS. Only names its policy allows are
// forwarded (as a fresh query: the client's id, flags, case and EDNS
// options go nowhere), and only for A records, whose final addresses it
// admits and returns under the asked name. AAAA has an empty answer, since
// a sandbox has no IPv6 path; other types too. Everything else is NXDOMAIN,
// answered here.
type resolver struct {
	sb       *sandbox
	upstream []string
	log      *slog.Logger
	ctx      context.Context // ends when the sandbox is detached
	sem      chan struct{}   // bounds exchanges in flight
	now      func() time.Time
}

func (r *resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	reply := r.answer(req)
	size := dns.MaxMsgSize
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size = dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = min(max(int(opt.UDPSize()), dns.MinMsgSize), udpSize)
		}
	}
	if req.IsEdns0() != nil {
		reply.SetEdns0(udpSize, false)
	}
	reply.Truncate(size)
	if err := w.WriteMsg(reply); err != nil {
		r.log.Debug("dns: answer not sent", "sandbox", r.sb.id, "err", err)
	}
}

// answer is the reply to req, before it is sized for its transport.
func (r *resolver) answer(req *dns.Msg) *dns.Msg {
	reply := new(dns.Msg)
	switch {
	case req.Opcode != dns.OpcodeQuery:
		return reply.SetRcode(req, dns.RcodeNotImplemented)
	case len(req.Question) != 1:
		return reply.SetRcode(req, dns.RcodeFormatError)
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		return reply.SetRcode(req, dns.RcodeNotImplemented)
	}
	name := normalizeName(q.Name)
	if !r.sb.rules.Load().nameAllowed(name) {
		r.log.Debug("dns: name not allowed", "sandbox", r.sb.id, "name", q.Name, "type", dns.TypeToString[q.Qtype])
		reply.SetRcode(req, dns.RcodeNameError)
		reply.RecursionAvailable = true
		return reply
	}
	reply.SetReply(req)
	reply.RecursionAvailable = true
	if q.Qtype != dns.TypeA {
		return reply
	}
	rcode, answers := r.resolve(name, q.Name)
	reply.Rcode = rcode
	reply.Answer = answers
	return reply
}

// resolve asks the upstream for name's A records, admits the final
// addresses of its answer for their TTL and returns them as records of
// owner (the name as the client wrote it).
func (r *resolver) resolve(name, owner string) (rcode int, answers []dns.RR) {
	select {
	case r.sem <- struct{}{}:
		defer func() { <-r.sem }()
	default:
		return dns.RcodeServerFailure, nil
	}
	q := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.SetEdns0(udpSize, false)
	resp, err := r.exchange(q)
	if err != nil {
		r.log.Debug("dns: upstream failed", "sandbox", r.sb.id, "name", name, "err", err)
		return dns.RcodeServerFailure, nil
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return dns.RcodeNameError, nil
	default:
		return dns.RcodeServerFailure, nil
	}
	addrs, ttl := finalA(resp, dns.Fqdn(name))
	now := r.now()
	for _, a := range addrs {
		r.sb.admitted.admit(a, name, now.Add(ttl+admitGrace), now)
		answers = append(answers, &dns.A{
			Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)},
			A:   a.AsSlice(),
		})
	}
	return dns.RcodeSuccess, answers
}

// finalA follows name's CNAME chain through resp's answer section and
// returns the A records at its end, with the smallest TTL on the way
// (capped).
func finalA(resp *dns.Msg, name string) ([]netip.Addr, time.Duration) {
	ttl := uint32(maxTTL / time.Second)
	for range maxChain {
		next := ""
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, name) {
				next, ttl = c.Target, min(ttl, c.Hdr.Ttl)
				break
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	var addrs []netip.Addr
	minA := ttl
	for _, rr := range resp.Answer {
		a, ok := rr.(*dns.A)
		if !ok || !strings.EqualFold(a.Hdr.Name, name) || len(addrs) == maxAnswers {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
			addrs = append(addrs, ip)
			minA = min(minA, a.Hdr.Ttl)
		}
	}
	return addrs, time.Duration(minA) * time.Second
}

// exchange asks each upstream server in turn, over TCP when an answer is
// truncated; a detached sandbox's exchanges end at once.
func (r *resolver) exchange(q *dns.Msg) (*dns.Msg, error) {
	if len(r.upstream) == 0 {
		return nil, errors.New("no upstream DNS server")
	}
	var errs []error
	for _, up := range r.upstream {
		resp, err := r.exchangeOne(q, "udp", up)
		if err == nil && resp.Truncated {
			resp, err = r.exchangeOne(q, "tcp", up)
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
		if r.ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (r *resolver) exchangeOne(q *dns.Msg, network, server string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(r.ctx, upstreamTimeout)
	defer cancel()
	c := &dns.Client{Net: network, Timeout: upstreamTimeout}
	co, err := c.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	stop := context.AfterFunc(ctx, func() { co.Close() })
	defer stop()
	resp, _, err := c.ExchangeWithConnContext(ctx, q, co)
	if err != nil {
		return nil, err
	}
	if len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, q.Question[0].Name) ||
		resp.Question[0].Qtype != q.Question[0].Qtype {
		return nil, errors.New("answer to another question")
	}
	return resp, nil
}
