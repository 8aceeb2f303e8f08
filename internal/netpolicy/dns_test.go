package netpolicy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testZone is an upstream DNS server for tests: it answers from a fixed
// zone and counts the questions it is asked, by lowercase name.
type testZone struct {
	a map[string]string // more A records: name to address

	mu    sync.Mutex
	asked map[string]int
	names []string // in order, as asked
}

func (z *testZone) count(name string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.asked[dns.Fqdn(name)]
}

func (z *testZone) total() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return len(z.names)
}

func (z *testZone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	z.mu.Lock()
	if z.asked == nil {
		z.asked = map[string]int{}
	}
	z.asked[q.Name]++
	z.names = append(z.names, q.Name)
	z.mu.Unlock()
	m := new(dns.Msg).SetReply(req)
	rr := func(s string) {
		r, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		m.Answer = append(m.Answer, r)
	}
	if ip, ok := z.a[q.Name]; ok {
		rr(q.Name + " 60 IN A " + ip)
		w.WriteMsg(m)
		return
	}
	switch q.Name {
	case "allowed.test.", "www.cdn.test.", "other.test.":
		rr(q.Name + " 300 IN A 192.0.2.10")
	case "chain.test.":
		rr("chain.test. 300 IN CNAME mid.elsewhere.")
		rr("mid.elsewhere. 20 IN CNAME end.elsewhere.")
		rr("end.elsewhere. 60 IN A 192.0.2.20")
		rr("end.elsewhere. 60 IN A 192.0.2.21")
		rr("unrelated.elsewhere. 60 IN A 192.0.2.99")
	case "long.test.":
		rr("long.test. 86400 IN A 192.0.2.30")
	case "zero.test.":
		rr("zero.test. 0 IN A 192.0.2.31")
	case "loop.test.":
		rr("loop.test. 60 IN CNAME loop.test.")
	case "many.test.":
		for i := range 100 {
			rr(fmt.Sprintf("many.test. 60 IN A 192.0.2.%d", i+100))
		}
	case "gone.test.":
		m.Rcode = dns.RcodeNameError
	default:
		m.Rcode = dns.RcodeServerFailure
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		m.Truncate(dns.MinMsgSize)
	}
	w.WriteMsg(m)
}

// serveDNS serves h on UDP and TCP at one loopback port until the test
// ends, and returns its address.
func serveDNS(t *testing.T, h dns.Handler) string {
	t.Helper()
	pc, ln, err := listenBoth("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveDNSOn(t, h, pc, ln)
	return pc.LocalAddr().String()
}

func serveDNSOn(t testing.TB, h dns.Handler, pc net.PacketConn, ln net.Listener) {
	t.Helper()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
}

// listenBoth listens on UDP and TCP at one port (the UDP one's, if addr's
// port is 0).
func listenBoth(addr string) (net.PacketConn, net.Listener, error) {
	for range 10 {
		pc, err := net.ListenPacket("udp4", addr)
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp4", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, fmt.Errorf("no port free for both UDP and TCP at %s", addr)
}

func newTestResolver(t *testing.T, p Policy, upstream ...string) (*resolver, *time.Time) {
	t.Helper()
	r, err := compile(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb := &sandbox{id: "test", admitted: newAdmitted(maxAdmitted)}
	sb.rules.Store(r)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	now := time.Unix(1_000_000, 0)
	return &resolver{
		sb: sb, upstream: upstream, log: slog.New(slog.DiscardHandler), ctx: ctx,
		sem: make(chan struct{}, maxDNSInFlight), now: func() time.Time { return now },
	}, &now
}

func TestResolver(t *testing.T) {
	zone := &testZone{}
	up := serveDNS(t, zone)
	res, now := newTestResolver(t, Policy{
		AllowDomains: []string{"allowed.test", "chain.test", "long.test", "zero.test", "loop.test", "many.test", "gone.test", "fail.test", "*.cdn.test"},
		DenyDomains:  []string{"bad.cdn.test"},
	}, up)
	type want struct {
		rcode int
		addrs []string // the answer's A records, all owned by the question's name
		ttl   uint32
	}
	for _, tc := range []struct {
		name, q string
		qtype   uint16
		want    want
		asked   bool // whether the upstream sees the question
	}{
		{"allowed", "allowed.test.", dns.TypeA, want{dns.RcodeSuccess, []string{"192.0.2.10"}, 300}, true},
		{"case is not forwarded", "AlLoWeD.TeSt.", dns.TypeA, want{dns.RcodeSuccess, []string{"192.0.2.10"}, 300}, true},
		{"wildcard", "www.cdn.test.", dns.TypeA, want{dns.RcodeSuccess, []string{"192.0.2.10"}, 300}, true},
		{"CNAME chain", "chain.test.", dns.TypeA, want{dns.RcodeSuccess, []string{"192.0.2.20", "192.0.2.21"}, 20}, true},
		{"TTL capped", "long.test.", dns.TypeA, want{dns.RcodeSuccess, []string{"192.0.2.30"}, uint32(maxTTL / time.Second)}, true},
		{"TTL zero", "zero.test.", dns.TypeA, want{dns.RcodeSuccess, []string{"192.0.2.31"}, 0}, true},
		{"CNAME loop", "loop.test.", dns.TypeA, want{rcode: dns.RcodeSuccess}, true},
		{"answers bounded, over TCP", "many.test.", dns.TypeA, want{dns.RcodeSuccess, manyAddrs(maxAnswers), 60}, true},
		{"upstream NXDOMAIN", "gone.test.", dns.TypeA, want{rcode: dns.RcodeNameError}, true},
		{"upstream SERVFAIL", "fail.test.", dns.TypeA, want{rcode: dns.RcodeServerFailure}, true},
		{"AAAA", "allowed.test.", dns.TypeAAAA, want{rcode: dns.RcodeSuccess}, false},
		{"other types", "allowed.test.", dns.TypeHTTPS, want{rcode: dns.RcodeSuccess}, false},
		{"not allowed", "other.test.", dns.TypeA, want{rcode: dns.RcodeNameError}, false},
		{"not allowed AAAA", "other.test.", dns.TypeAAAA, want{rcode: dns.RcodeNameError}, false},
		{"denied under an allowed wildcard", "bad.cdn.test.", dns.TypeA, want{rcode: dns.RcodeNameError}, false},
		{"wildcard's own domain", "cdn.test.", dns.TypeA, want{rcode: dns.RcodeNameError}, false},
		{"escaped dot", `secret\.www.cdn.test.`, dns.TypeA, want{rcode: dns.RcodeNameError}, false},
		{"reverse lookup", "10.2.0.192.in-addr.arpa.", dns.TypePTR, want{rcode: dns.RcodeNameError}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := zone.count(strings.ToLower(tc.q))
			total := zone.total()
			reply := res.answer(new(dns.Msg).SetQuestion(tc.q, tc.qtype))
			if reply.Rcode != tc.want.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[reply.Rcode], dns.RcodeToString[tc.want.rcode])
			}
			var got []string
			for _, rr := range reply.Answer {
				a, ok := rr.(*dns.A)
				if !ok || a.Hdr.Name != tc.q || a.Hdr.Ttl != tc.want.ttl {
					t.Errorf("answer %v, want A records of %s with TTL %d", rr, tc.q, tc.want.ttl)
					continue
				}
				got = append(got, a.A.String())
				ip := netip.MustParseAddr(a.A.String())
				until := now.Add(time.Duration(tc.want.ttl)*time.Second + admitGrace)
				if !res.sb.admitted.has(ip, until.Add(-time.Second)) || res.sb.admitted.has(ip, until) {
					t.Errorf("%s not admitted for its TTL and grace", ip)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want.addrs) {
				t.Errorf("answers %v, want %v", got, tc.want.addrs)
			}
			asked := zone.count(strings.ToLower(tc.q)) > before
			if asked != tc.asked || !tc.asked && zone.total() != total {
				t.Errorf("upstream asked: %v, want %v", asked, tc.asked)
			}
		})
	}
	if res.sb.admitted.has(netip.MustParseAddr("192.0.2.99"), *now) {
		t.Error("an address beside the CNAME chain was admitted")
	}
	for _, name := range zone.names {
		if name != strings.ToLower(name) {
			t.Errorf("upstream asked %q: the client's case went out", name)
		}
	}
}

func manyAddrs(n int) []string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("192.0.2.%d", i+100))
	}
	return s
}

func TestResolverMalformed(t *testing.T) {
	res, _ := newTestResolver(t, Policy{AllowDomains: []string{"allowed.test"}}, "127.0.0.1:1")
	notify := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)
	notify.Opcode = dns.OpcodeNotify
	chaos := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	two := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	none := new(dns.Msg)
	for _, tc := range []struct {
		name  string
		req   *dns.Msg
		rcode int
	}{
		{"notify", notify, dns.RcodeNotImplemented},
		{"chaos", chaos, dns.RcodeNotImplemented},
		{"two questions", two, dns.RcodeFormatError},
		{"no question", none, dns.RcodeFormatError},
		// Nothing listens on the upstream's port.
		{"upstream down", new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA), dns.RcodeServerFailure},
	} {
		if got := res.answer(tc.req).Rcode; got != tc.rcode {
			t.Errorf("%s: rcode %s, want %s", tc.name, dns.RcodeToString[got], dns.RcodeToString[tc.rcode])
		}
	}
	// Exchanges in flight are bounded; past the bound, SERVFAIL at once.
	for range maxDNSInFlight {
		res.sem <- struct{}{}
	}
	if got := res.answer(new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)).Rcode; got != dns.RcodeServerFailure {
		t.Errorf("busy: rcode %s", dns.RcodeToString[got])
	}
}

// TestResolverTransport serves the resolver on loopback: a UDP answer too
// large for a client without EDNS is truncated, and complete over TCP.
func TestResolverTransport(t *testing.T) {
	zone := &testZone{}
	up := serveDNS(t, zone)
	res, _ := newTestResolver(t, Policy{AllowDomains: []string{"many.test", "allowed.test"}}, up)
	addr := serveDNS(t, res)
	for _, tc := range []struct {
		net   string
		edns  uint16
		trunc bool
	}{
		{"udp", 0, true},
		{"udp", 4096, false},
		{"tcp", 0, false},
	} {
		q := new(dns.Msg).SetQuestion("many.test.", dns.TypeA)
		if tc.edns != 0 {
			q.SetEdns0(tc.edns, false)
		}
		c := &dns.Client{Net: tc.net, Timeout: 5 * time.Second}
		reply, _, err := c.Exchange(q, addr)
		if err != nil {
			t.Fatalf("%s/%d: %v", tc.net, tc.edns, err)
		}
		if reply.Truncated != tc.trunc || !tc.trunc && len(reply.Answer) != maxAnswers {
			t.Errorf("%s/%d: truncated %v with %d answers", tc.net, tc.edns, reply.Truncated, len(reply.Answer))
		}
		if tc.edns != 0 && reply.IsEdns0() == nil {
			t.Errorf("%s/%d: no EDNS in the answer", tc.net, tc.edns)
		}
	}
}
