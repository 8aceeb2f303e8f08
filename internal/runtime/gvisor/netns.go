package gvisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/netns"
)

// Every sandbox gets two network namespaces joined by a veth pair, with the
// addresses every sandbox's link has (netns.HostAddr and the rest): the
// guest namespace, which runsc takes over (its netstack serves the
// sandbox), and a host-side namespace from which the daemon dials the
// agent. Neither namespace has any other link: no route leads out of the
// host side. The guest's default route points at the host side, where the
// daemon's resolver and egress proxy answer (internal/netpolicy); runsc
// takes the route over with the interface.
const (
	guestRole = "g" // netns.Name's role of the guest namespace
	hostRole  = "h" // and of the host side
)

// setupNetns creates the namespace pair for a sandbox, all in this
// process: namespaces bind-mounted by netns.Add, links and addresses over
// netlink from a thread inside each namespace, no ip(8).
func setupNetns(ctx context.Context, id string) error {
	g, h := netns.Name(id, guestRole), netns.Name(id, hostRole)
	if err := netns.Add(ctx, g); err != nil {
		return err
	}
	if err := netns.Add(ctx, h); err != nil {
		return err
	}
	gf, err := os.Open(filepath.Join(netns.Dir, g))
	if err != nil {
		return err
	}
	defer gf.Close()
	// Both ends of the veth are made with IPv6 off, so neither ever has a
	// link-local fe80:: address: runsc copies the guest end's addresses
	// into its netstack, and the host end would otherwise answer the
	// sandbox (and announce itself) over IPv6 past the IPv4-only rules.
	// "default" is set in each namespace before the link exists there.
	if err := netns.DisableIPv6(g, "default"); err != nil {
		return err
	}
	if err := netns.Do(h, func() error { return hostSide(int(gf.Fd())) }); err != nil {
		return fmt.Errorf("netns %s: %w", h, err)
	}
	if err := netns.Do(g, guestSide); err != nil {
		return fmt.Errorf("netns %s: %w", g, err)
	}
	return nil
}

// hostSide, on a thread in the host-side namespace, makes the veth pair
// with its guest end in the namespace open as guestNS, and sets up the
// host end.
func hostSide(guestNS int) error {
	if err := netns.DisableIPv6Here("default"); err != nil {
		return err
	}
	hostMAC, _ := net.ParseMAC(netns.HostMAC)
	guestMAC, _ := net.ParseMAC(netns.GuestMAC)
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: "veth0", MTU: netns.MTU, HardwareAddr: hostMAC, TxQLen: -1},
		PeerName:         "eth0",
		PeerHardwareAddr: guestMAC,
		PeerMTU:          netns.MTU,
		PeerNamespace:    netlink.NsFd(guestNS),
		PeerTxQLen:       -1,
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth: %w", err)
	}
	if err := netns.DisableIPv6Here("veth0"); err != nil {
		return err
	}
	return linkUp("veth0", netns.HostAddr, "")
}

// guestSide, on a thread in the guest namespace, sets up the veth's guest
// end and the default route through the host side.
func guestSide() error {
	if err := netns.DisableIPv6Here("eth0"); err != nil {
		return err
	}
	return linkUp("eth0", netns.GuestAddr, netns.HostIP)
}

// linkUp gives link name its address and brings it and lo up; with a
// gateway, it routes everything through it (as ip route add default via).
func linkUp(name, addr, gateway string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, a); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	if gateway == "" {
		return nil
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(gateway), Protocol: unix.RTPROT_BOOT}
	if err := netlink.RouteAdd(route); err != nil {
		return fmt.Errorf("default route via %s: %w", gateway, err)
	}
	return nil
}

// teardownNetns deletes the namespace pair; deleting a namespace deletes its
// end of the veth pair, and with it the other end.
func teardownNetns(ctx context.Context, id string) error {
	return netns.Delete(ctx, netns.Name(id, guestRole), netns.Name(id, hostRole))
}

// Netns implements runtime.Runtime: the host-side namespace.
func (r *Runtime) Netns(id string) string { return netns.Name(id, hostRole) }
