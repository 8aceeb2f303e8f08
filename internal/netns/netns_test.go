package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestName(t *testing.T) {
	for _, tc := range []struct{ id, role, want string }{
		{"sb-1", "g", "cove-sb-1-g"},
		{"vm-a", "v", "cove-vm-a-v"},
	} {
		if got := Name(tc.id, tc.role); got != tc.want {
			t.Errorf("Name(%q, %q) = %q, want %q", tc.id, tc.role, got, tc.want)
		}
	}
}

// TestDo makes a namespace, runs a function inside it and deletes it: the
// function sees the namespace's network, the caller's thread its own.
func TestDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	ns := Name(fmt.Sprintf("test%d", os.Getpid()), "t")
	if Exists(ns) {
		t.Fatalf("%s exists before Add", ns)
	}
	if err := Add(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer Delete(ctx, ns)
	self := netnsInode(t)
	var inside uint64
	if err := Do(ns, func() error { inside = netnsInode(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside == self {
		t.Fatal("fn ran in the caller's namespace")
	}
	if netnsInode(t) != self {
		t.Fatal("the caller's namespace changed")
	}
	if err := Do("no-such-ns", func() error { return nil }); err == nil {
		t.Fatal("Do in a missing namespace succeeded")
	}
	for range 2 { // the second finds nothing to delete
		if err := Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if Exists(ns) {
		t.Fatalf("%s exists after Delete", ns)
	}
}

func netnsInode(t *testing.T) uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestDisableIPv6: a veth made after "default" is disabled has no IPv6
// address on either end, up or not, while one made before has its fe80::
// link-local; bad names are refused.
func TestDisableIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(ipv6Conf); err != nil {
		t.Skip("the host has no IPv6")
	}
	ctx := context.Background()
	ns := Name(fmt.Sprintf("test%d", os.Getpid()), "6")
	if err := Add(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer Delete(ctx, ns)
	// A control pair made before: the kernel gives it link-locals.
	mk := func(a, b string) {
		t.Helper()
		cmds := fmt.Sprintf("link add %s type veth peer name %s\nlink set %s up\nlink set %s up\n", a, b, a, b)
		if err := IP(ctx, ns, strings.NewReader(cmds), "-batch", "-"); err != nil {
			t.Fatal(err)
		}
	}
	mk("ctl0", "ctl1")
	if err := DisableIPv6(ns, "default"); err != nil {
		t.Fatal(err)
	}
	mk("veth0", "eth0")
	for _, tc := range []struct {
		ifc      string
		disabled bool
	}{{"ctl0", false}, {"ctl1", false}, {"veth0", true}, {"eth0", true}, {"default", true}} {
		off, err := IPv6Disabled(ns, tc.ifc)
		if err != nil || off != tc.disabled {
			t.Errorf("IPv6Disabled(%s) = %v, %v; want %v", tc.ifc, off, err, tc.disabled)
		}
	}
	// Link-locals arrive after duplicate address detection: wait for the
	// control's, then the disabled pair must still have none.
	var addrs map[string][]string
	for deadline := time.Now().Add(5 * time.Second); ; {
		addrs = ipv6Addrs(t, ns)
		if len(addrs["ctl0"]) > 0 && len(addrs["ctl1"]) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(addrs["ctl0"]) == 0 {
		t.Fatalf("control veth got no IPv6 address, so the check proves nothing: %v", addrs)
	}
	for _, ifc := range []string{"veth0", "eth0"} {
		if len(addrs[ifc]) > 0 {
			t.Errorf("%s has IPv6 addresses %v", ifc, addrs[ifc])
		}
	}
	// Disabling by name works on a link that has addresses: they go.
	if err := DisableIPv6(ns, "ctl0"); err != nil {
		t.Fatal(err)
	}
	if a := ipv6Addrs(t, ns)["ctl0"]; len(a) > 0 {
		t.Errorf("ctl0 still has %v after DisableIPv6", a)
	}
	for _, bad := range []string{"", "..", "../all", "nosuch0"} {
		if err := DisableIPv6(ns, bad); err == nil {
			t.Errorf("DisableIPv6(%q) succeeded", bad)
		}
	}
}

// ipv6Addrs maps each link of ns to its IPv6 addresses.
func ipv6Addrs(t *testing.T, ns string) map[string][]string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-6", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -6 addr: %v: %s", err, out)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "inet6" {
			name, _, _ := strings.Cut(f[1], "@")
			m[name] = append(m[name], f[3])
		}
	}
	return m
}
