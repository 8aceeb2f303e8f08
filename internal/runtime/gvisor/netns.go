package gvisor

import (
	"context"
	"fmt"
	"strings"

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

// setupNetns creates the namespace pair for a sandbox.
func setupNetns(ctx context.Context, id string) error {
	g, h := netns.Name(id, guestRole), netns.Name(id, hostRole)
	if err := netns.Add(ctx, g); err != nil {
		return err
	}
	if err := netns.Add(ctx, h); err != nil {
		return err
	}
	// Both ends of the veth are made with IPv6 off, so neither ever has a
	// link-local fe80:: address: runsc copies the guest end's addresses
	// into its netstack, and the host end would otherwise answer the
	// sandbox (and announce itself) over IPv6 past the IPv4-only rules.
	for _, ns := range []string{g, h} {
		if err := netns.DisableIPv6(ns, "default"); err != nil {
			return err
		}
	}
	hostCmds := fmt.Sprintf("link add veth0 mtu %d address %s type veth peer name eth0 mtu %d address %s netns %s\n"+
		"addr add %s dev veth0\nlink set veth0 up\nlink set lo up\n", netns.MTU, netns.HostMAC, netns.MTU, netns.GuestMAC, g, netns.HostAddr)
	if err := netns.IP(ctx, h, strings.NewReader(hostCmds), "-batch", "-"); err != nil {
		return err
	}
	if err := netns.DisableIPv6(h, "veth0"); err != nil {
		return err
	}
	if err := netns.DisableIPv6(g, "eth0"); err != nil {
		return err
	}
	guestCmds := fmt.Sprintf("addr add %s dev eth0\nlink set eth0 up\nlink set lo up\nroute add default via %s dev eth0\n",
		netns.GuestAddr, netns.HostIP)
	return netns.IP(ctx, g, strings.NewReader(guestCmds), "-batch", "-")
}

// teardownNetns deletes the namespace pair; deleting a namespace deletes its
// end of the veth pair, and with it the other end.
func teardownNetns(ctx context.Context, id string) error {
	return netns.Delete(ctx, netns.Name(id, guestRole), netns.Name(id, hostRole))
}

// Netns implements runtime.Runtime: the host-side namespace.
func (r *Runtime) Netns(id string) string { return netns.Name(id, hostRole) }
