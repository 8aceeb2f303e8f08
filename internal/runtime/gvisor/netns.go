package gvisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/cove-sandbox/cove/internal/netns"
)

// Every sandbox gets two network namespaces joined by a veth pair: the guest
// namespace, which runsc takes over (its netstack serves the sandbox), and a
// host-side namespace from which the daemon dials the agent. Every pair has
// the same addresses and MACs, so a checkpoint taken in one pair restores
// into another. Neither namespace has any other link: no route leads out.
const (
	hostAddr  = "10.77.0.1/30"
	guestAddr = "10.77.0.2/30"
	guestIP   = "10.77.0.2"
	hostMAC   = "02:c0:7e:00:00:01"
	guestMAC  = "02:c0:7e:00:00:02"
)

const netnsDir = netns.Dir

// mtu of the veth pair.
const mtu = 65000

func guestNetns(id string) string { return "cove-" + id + "-g" }
func hostNetns(id string) string  { return "cove-" + id + "-h" }

// setupNetns creates the namespace pair for a sandbox.
func setupNetns(ctx context.Context, id string) error {
	g, h := guestNetns(id), hostNetns(id)
	if err := ip(ctx, "", nil, "netns", "add", g); err != nil {
		return err
	}
	if err := ip(ctx, "", nil, "netns", "add", h); err != nil {
		return err
	}
	// A large MTU: the agent channel carries files, and netstack's cost is
	// per packet.
	hostCmds := fmt.Sprintf("link add veth0 mtu %d address %s type veth peer name eth0 mtu %d address %s netns %s\n"+
		"addr add %s dev veth0\nlink set veth0 up\nlink set lo up\n", mtu, hostMAC, mtu, guestMAC, g, hostAddr)
	if err := ip(ctx, h, strings.NewReader(hostCmds), "-batch", "-"); err != nil {
		return err
	}
	guestCmds := fmt.Sprintf("addr add %s dev eth0\nlink set eth0 up\nlink set lo up\n", guestAddr)
	return ip(ctx, g, strings.NewReader(guestCmds), "-batch", "-")
}

// teardownNetns deletes the namespace pair; deleting a namespace deletes its
// end of the veth pair, and with it the other end.
func teardownNetns(ctx context.Context, id string) error {
	var firstErr error
	for _, ns := range []string{guestNetns(id), hostNetns(id)} {
		if _, err := os.Stat(netnsDir + "/" + ns); os.IsNotExist(err) {
			continue
		}
		if err := ip(ctx, "", nil, "netns", "delete", ns); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func ip(ctx context.Context, ns string, stdin *strings.Reader, args ...string) error {
	return netns.IP(ctx, ns, stdin, args...)
}

// dialInNetns connects to addr from inside the named network namespace.
func dialInNetns(ctx context.Context, ns, addr string) (net.Conn, error) {
	return netns.Dial(ctx, ns, addr)
}
