package netpolicy

import (
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/netns"
)

// tableName is cove's nftables table (family inet) in a sandbox's host-end
// namespace; nothing else of cove's lives there.
const tableName = "cove"

// Ports the daemon listens on at the host end of the link, inside the
// sandbox's namespace.
const (
	dnsPort   = 53
	proxyPort = 15001
)

// installRules replaces cove's table in namespace ns, in one transaction:
// the guest's DNS is redirected to the resolver, its other TCP to the
// proxy, and everything else that reaches the namespace (UDP, ICMP, IPv6,
// forwarding) is dropped. The rules live in the namespace, so they go with
// it; while no daemon listens, the redirected connections are refused.
func installRules(ns string) error {
	f, err := os.Open(netns.Dir + "/" + ns)
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", ns, err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	// Adding a table that exists is no error, so add-delete-add replaces
	// it whether or not it was there, atomically.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	drop := nftables.ChainPolicyDrop
	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority, policy *nftables.ChainPolicy) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: policy})
	}
	v6 := chain("ipv6", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRaw, nil)
	nat := chain("prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest, nil)
	in := chain("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter, &drop)
	chain("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter, &drop)

	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	rule(v6, nfproto(unix.NFPROTO_IPV6), verdict(expr.VerdictDrop))

	fromGuest := append(ifname(expr.CmpOpNeq, "lo"), nfproto(unix.NFPROTO_IPV4)...)
	rule(nat, fromGuest, dport(unix.IPPROTO_UDP, dnsPort), redirect(dnsPort))
	rule(nat, fromGuest, dport(unix.IPPROTO_TCP, dnsPort), redirect(dnsPort))
	rule(nat, fromGuest, l4proto(unix.IPPROTO_TCP), redirect(proxyPort))

	rule(in, ctEstablished(), verdict(expr.VerdictAccept))
	rule(in, ifname(expr.CmpOpEq, "lo"), verdict(expr.VerdictAccept))
	v4 := nfproto(unix.NFPROTO_IPV4)
	rule(in, v4, dport(unix.IPPROTO_UDP, dnsPort), verdict(expr.VerdictAccept))
	rule(in, v4, dport(unix.IPPROTO_TCP, dnsPort), verdict(expr.VerdictAccept))
	rule(in, v4, dport(unix.IPPROTO_TCP, proxyPort), verdict(expr.VerdictAccept))

	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables rules in %s: %w", ns, err)
	}
	return nil
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// dport matches protocol p's destination port.
func dport(p byte, port uint16) []expr.Any {
	return append(l4proto(p),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	)
}

func ifname(op expr.CmpOp, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: b},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// redirect sends the packet to port on the address of the interface it
// came in on (the host end of the link).
func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
