package e2e

// What a sandbox's network holds on the host, counted for the sandboxes of
// one daemon only (other runs share this machine): its namespaces, the
// nftables table in its host end, and the daemon's sockets (listeners,
// dialled connections) and namespace files in it.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// hostEnd is the namespace holding the host end of sandbox id's link.
func hostEnd(id string) string {
	if backend() == "qemu" {
		return netns.Name(id, "v")
	}
	return netns.Name(id, "h")
}

// nsInode returns the inode of a namespace file.
func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// daemonNetns returns, by namespace inode, the daemon's sockets that live
// in a network namespace other than its own, and the other network
// namespaces it holds open as files.
func daemonNetns(t *testing.T, pid int) (sockets, files map[uint64]int) {
	t.Helper()
	own, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of the daemon: %v", err)
	}
	defer unix.Close(pidfd)
	sockets, files = map[uint64]int{}, map[uint64]int{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(link, "net:["); ok {
			if n, _ := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64); n != own {
				files[n]++
			}
			continue
		}
		if !strings.HasPrefix(link, "socket:[") {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		ours, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			continue // closed meanwhile
		}
		nsfd, err := unix.IoctlRetInt(ours, unix.SIOCGSKNS)
		unix.Close(ours)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(nsfd, &st) == nil && st.Ino != own {
			sockets[st.Ino]++
		}
		unix.Close(nsfd)
	}
	return sockets, files
}

// hasCoveTable reports whether namespace ns has cove's nftables table.
func hasCoveTable(t *testing.T, ns string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(netns.Dir, ns))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatalf("nftables in %s: %v", ns, err)
	}
	for _, tb := range tables {
		if tb.Name == "cove" {
			return true
		}
	}
	return false
}

// netHeld checks that each live sandbox holds its network (its host end
// namespace, cove's table there, the daemon's sockets in it) and that the
// gone ones hold nothing: no namespace named for them, no link in the
// host's namespace, and no daemon socket or namespace file outside the
// live sandboxes' namespaces. Teardown may finish a moment after the API
// answers, so it polls.
func netHeld(t *testing.T, d *daemon, live, gone []string) {
	t.Helper()
	var problems []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		problems = netProblems(t, d, live, gone)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func netProblems(t *testing.T, d *daemon, live, gone []string) []string {
	var problems []string
	liveNS := map[uint64]bool{}
	for _, id := range live {
		ns := hostEnd(id)
		ino, err := nsInode(filepath.Join(netns.Dir, ns))
		if err != nil {
			problems = append(problems, fmt.Sprintf("live sandbox %s: no namespace %s", id, ns))
			continue
		}
		liveNS[ino] = true
		if !hasCoveTable(t, ns) {
			problems = append(problems, fmt.Sprintf("live sandbox %s: no nftables table cove in %s", id, ns))
		}
	}
	sockets, files := daemonNetns(t, d.cmd.Process.Pid)
	for ino := range liveNS {
		if sockets[ino] == 0 {
			problems = append(problems, fmt.Sprintf("a live sandbox's namespace (inode %d) has no socket of the daemon: its resolver and proxy are not listening", ino))
		}
	}
	for ino, n := range sockets {
		if !liveNS[ino] {
			problems = append(problems, fmt.Sprintf("the daemon holds %d sockets in a network namespace (inode %d) no live sandbox has", n, ino))
		}
	}
	for ino, n := range files {
		if !liveNS[ino] {
			problems = append(problems, fmt.Sprintf("the daemon holds %d open files of a network namespace (inode %d) no live sandbox has", n, ino))
		}
	}
	links, _ := net.Interfaces()
	for _, id := range gone {
		for _, role := range []string{"g", "h", "v"} {
			if netns.Exists(netns.Name(id, role)) {
				problems = append(problems, fmt.Sprintf("gone sandbox %s: namespace %s remains", id, netns.Name(id, role)))
			}
		}
		for _, l := range links {
			if strings.Contains(l.Name, id) {
				problems = append(problems, fmt.Sprintf("gone sandbox %s: link %s remains", id, l.Name))
			}
		}
	}
	return problems
}

// TestNetworkNoLeak: 50 networked sandboxes (fewer under QEMU/TCG, where
// each is a VM booted in software) are created and killed, and leave
// nothing; then, with a few live ones, the daemon is SIGKILLed and
// restarted: the live ones get their network back (policy and behaviour),
// one killed while it was down leaves nothing, and once all are killed
// nothing of any remains.
func TestNetworkNoLeak(t *testing.T) {
	tn := suite.net
	d, err := startDaemon(filepath.Join(suite.tmp, "netleak"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	baseline := countResources(t, d.stateDir())
	n, k := 50, 4
	if backend() == "qemu" {
		n, k = 6, 3
	}
	p := apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Allowed)}, AllowDomains: []string{testnet.AllowedName}}
	ids := func(sbs []sandbox) []string {
		var out []string
		for _, sb := range sbs {
			out = append(out, sb.id)
		}
		return out
	}

	many := createNet(t, d, apitype.CreateSandboxRequest{N: n}, &p)
	netHeld(t, d, ids(many), nil)
	check(t, d, many[len(many)-1],
		probeCase{httpGet(webURL("http", tn.Allowed)), reach, banner(tn.Allowed), "one of many"})
	for _, sb := range many {
		if err := d.c.DeleteSandbox(context.Background(), sb.id); err != nil {
			t.Fatal(err)
		}
	}
	gone := ids(many)
	netHeld(t, d, nil, gone)
	waitOwnResources(t, d, baseline)

	live := createNet(t, d, apitype.CreateSandboxRequest{N: k}, &p)
	netHeld(t, d, ids(live), gone)
	d.kill9()
	victim := live[0]
	killProcs(t, victim.id)
	live = live[1:]
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	gone = append(gone, victim.id)
	netHeld(t, d, ids(live), gone)
	for _, sb := range live {
		if got := getNet(t, d, sb.id).Network; !samePolicy(got, p) {
			t.Errorf("after the restart %s has %+v, want %+v", sb.id, got, p)
		}
	}
	check(t, d, live[0],
		probeCase{httpGet(webURL("http", tn.Allowed)), reach, banner(tn.Allowed), "after the restart"},
		probeCase{httpGet("http://" + testnet.AllowedName + "/"), reach, banner(tn.Allowed), "after the restart, by name"},
		probeCase{httpGet(webURL("http", tn.Other)), refused, "", "after the restart"},
	)
	for _, sb := range live {
		if err := d.c.DeleteSandbox(context.Background(), sb.id); err != nil {
			t.Fatal(err)
		}
	}
	netHeld(t, d, nil, append(gone, ids(live)...))
	waitOwnResources(t, d, baseline)
}

// waitOwnResources polls until what d's sandboxes hold that is d's alone
// (processes, mounts, directories, RAM files under its state directory) is
// back to want; namespaces are checked by name, by netHeld.
func waitOwnResources(t *testing.T, d *daemon, want resources) {
	t.Helper()
	own := func(r resources) resources {
		return resources{RunscProcs: r.RunscProcs, Dirs: r.Dirs, ShmFiles: r.ShmFiles, Mounts: r.Mounts}
	}
	var got resources
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = own(countResources(t, d.stateDir())); got == own(want) {
			return
		}
	}
	t.Errorf("resources leaked: have %+v, want %+v; mounts:\n%s", got, own(want), strings.Join(sandboxMounts(d.stateDir()), "\n"))
}
