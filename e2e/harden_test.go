package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHardenNoIPv6: a sandbox's link speaks no IPv6. Inside, no address
// but loopback's ::1 (gVisor takes its interfaces' addresses from the
// guest end of the veth; the VM's kernel has no IPv6 at all); on the host,
// no link in any of the sandbox's namespaces has an IPv6 address but
// loopback's, and every non-loopback link has IPv6 off.
func TestHardenNoIPv6(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	inside := execOK(t, d, sb, "cat /proc/net/if_inet6 2>/dev/null; ip -6 -o addr show 2>/dev/null || true")
	for _, line := range strings.Split(strings.TrimSpace(inside), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		// /proc/net/if_inet6: addr(32 hex) idx plen scope flags name;
		// ip -o: idx name inet6 addr/plen ...
		switch {
		case len(f) == 6 && len(f[0]) == 32:
			if f[0] != "00000000000000000000000000000001" {
				t.Errorf("sandbox has an IPv6 address: %q", line)
			}
		case len(f) >= 4 && f[2] == "inet6":
			if f[3] != "::1/128" {
				t.Errorf("sandbox has an IPv6 address: %q", line)
			}
		}
	}
	names := sandboxNetns(t, sb.id)
	if len(names) != netnsPerSandbox() {
		t.Fatalf("sandbox %s's namespaces: %v, want %d", sb.id, names, netnsPerSandbox())
	}
	for _, ns := range names {
		out, err := exec.Command("ip", "-n", ns, "-6", "-o", "addr", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s -6 addr: %v: %s", ns, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) >= 4 && f[1] != "lo" {
				t.Errorf("namespace %s: an IPv6 address on the sandbox's link: %q", ns, line)
			}
		}
		links, err := exec.Command("ip", "-n", ns, "-o", "link", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s link: %v: %s", ns, err, links)
		}
		nonLo := 0
		for _, line := range strings.Split(strings.TrimSpace(string(links)), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if name == "lo" {
				continue
			}
			nonLo++
			v, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6").CombinedOutput()
			if err != nil || strings.TrimSpace(string(v)) != "1" {
				t.Errorf("namespace %s: %s has disable_ipv6 %q (%v), want 1", ns, name, strings.TrimSpace(string(v)), err)
			}
		}
		if nonLo == 0 && !strings.HasSuffix(ns, "-g") {
			// gVisor's guest end may be taken over by runsc; every
			// host end must have its link.
			t.Errorf("namespace %s has no link besides lo: the check proves nothing", ns)
		}
	}
}

// sandboxNetns lists the network namespaces of sandbox id.
func sandboxNetns(t *testing.T, id string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "cove-"+id+"-") && isBackendNetns(f[0]) {
			names = append(names, f[0])
		}
	}
	return names
}
