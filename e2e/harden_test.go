package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
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

// TestHardenSnapshotRAM: a snapshot's files are never written by the
// sandboxes made from it. Two children spawned from a fresh snapshot and a
// branch of one of them overwrite their memory (page cache dropped, then
// filled anew) and disk; afterwards every file of the snapshot hashes as
// before. Under QEMU the snapshot's RAM file, which every clone maps, is
// root's and not writable by the user a clone's QEMU runs as (and
// readable, so the check can tell), and each clone opens it read-only.
func TestHardenSnapshotRAM(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	tag := newSnapshot(t, d, 0)
	snapDir := filepath.Join(d.stateDir(), "snapshots", tag)
	before := hashTree(t, snapDir)
	if len(before) == 0 {
		t.Fatalf("snapshot %s: no files under %s", tag, snapDir)
	}
	var ram string
	for p := range before {
		if filepath.Base(p) == "mem" {
			ram = p
		}
	}
	if backend() == "qemu" && ram == "" {
		t.Fatalf("QEMU snapshot %s has no RAM file: %v", tag, keys(before))
	}

	kids := spawn(t, d, tag, 2)
	// Dropping the page cache frees pages the snapshot's RAM holds data
	// in; filling tmpfs then writes over them.
	scribble := "sync; echo 3 > /proc/sys/vm/drop_caches; " +
		"head -c 96M /dev/urandom > /dev/shm/fill; head -c 32M /dev/urandom > /work/fill; sync; " +
		"python3 -c 'b = bytearray(64 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(len(b))'"
	for _, k := range kids {
		execOK(t, d, k, scribble)
	}
	res, err := d.c.Branch(ctx, kids[0].id, kids[0].token, apitype.BranchRequest{N: 1})
	if err != nil {
		t.Fatalf("branch: %v\n%s", err, d.logTail())
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, res.Tag) })
	for _, c := range res.Children {
		t.Cleanup(func() { d.c.DeleteSandbox(ctx, c.ID) })
		execOK(t, d, sandbox{c.ID, c.Token}, scribble)
	}

	if backend() == "qemu" {
		checkRAMFileProtected(t, d, ram, kids[1].id)
	}
	// Still running, the clones have written all they will.
	after := hashTree(t, snapDir)
	for p, h := range before {
		if after[p] != h {
			t.Errorf("snapshot file %s changed (%s -> %s) while its children ran", p, h[:12], after[p][:min(12, len(after[p]))])
		}
	}
}

// checkRAMFileProtected checks a snapshot's RAM file, and the clone id's
// view of it (a hard link, or a copy on another filesystem), against the
// clone's QEMU.
func checkRAMFileProtected(t *testing.T, d *daemon, ram, id string) {
	t.Helper()
	pid, args := "", []string(nil)
	for p, a := range backendProcs(d.stateDir()) {
		if strings.Contains(strings.Join(a, " "), "/"+id+"/") {
			pid, args = p, a
		}
	}
	if pid == "" {
		t.Fatalf("no QEMU of clone %s", id)
	}
	cmd := strings.Join(args, " ")
	view := filepath.Join(d.stateDir(), "sandboxes", id, "mem")
	if !strings.Contains(cmd, "mem-path="+view+",") || !strings.Contains(cmd, "share=off") || !strings.Contains(cmd, "readonly=on,rom=off") {
		t.Errorf("clone %s's QEMU does not map %s read-only and private: %s", id, view, cmd)
	}
	for _, p := range []string{ram, view} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Mode&0o222 != 0 {
			t.Errorf("RAM file %s: owner %d mode %o, want root's and read-only", p, st.Uid, st.Mode&0o7777)
		}
	}
	uid, gid := procIDs(t, pid)
	if uid == 0 {
		// Root's QEMU could write anything; the daemon runs it as its
		// unprivileged user where that exists (make deps-qemu makes it).
		t.Fatalf("clone %s's QEMU runs as root", id)
	}
	// As QEMU's user and groups (one uid per VM reads snapshots through
	// the shared group), through the path QEMU opens.
	st, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	groups := "--clear-groups"
	if g := strings.Fields(st["Groups"]); len(g) > 0 {
		groups = "--groups=" + strings.Join(g, ",")
	}
	as := func(test string) error {
		return exec.Command("setpriv", "--reuid="+uid2s(uid), "--regid="+uid2s(gid), groups, "test", test, view).Run()
	}
	if err := as("-r"); err != nil {
		t.Errorf("QEMU's user %d cannot read %s, so the write check proves nothing: %v", uid, view, err)
	}
	if err := as("-w"); err == nil {
		t.Errorf("QEMU's user %d can write the RAM file %s", uid, view)
	}
}

func uid2s(n int) string { return strconv.Itoa(n) }

// procIDs reads a process's real uid and gid from /proc.
func procIDs(t *testing.T, pid string) (uid, gid int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "Uid:" || f[0] == "Gid:") {
			n, _ := strconv.Atoi(f[1])
			if f[0] == "Uid:" {
				uid = n
			} else {
				gid = n
			}
		}
	}
	return uid, gid
}

// hashTree maps every regular file below dir to its SHA-256.
func hashTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		out[p] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// procStatus reads the fields of /proc/<pid>/status that say what a
// process may do: its ids, capabilities, no_new_privs and seccomp mode.
func procStatus(pid string) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k {
		case "Name", "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters":
			if ok {
				out[k] = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	return out, nil
}

// openFiles lists what pid's descriptors are open on, each once.
func openFiles(pid string) []string {
	ents, _ := os.ReadDir("/proc/" + pid + "/fd")
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/" + pid + "/fd/" + e.Name())
		if err == nil && !seen[target] {
			seen[target] = true
			out = append(out, target)
		}
	}
	slices.Sort(out)
	return out
}

// ownNamespaces lists the namespaces pid does not share with this test.
func ownNamespaces(pid string) []string {
	var own []string
	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		a, err1 := os.Readlink("/proc/" + pid + "/ns/" + ns)
		b, err2 := os.Readlink("/proc/self/ns/" + ns)
		if err1 == nil && err2 == nil && a != b {
			own = append(own, ns)
		}
	}
	return own
}

// TestHardenBackendProcesses: what the processes that run a sandbox may
// do on the host, from /proc/<pid>/status of a running sandbox's (the
// figures docs/SECURITY.md quotes). Under gVisor every runsc process of
// the sandbox runs under a seccomp filter; the sandbox process (the
// sandbox's kernel) and the gofer hold no capability but those listed.
// Under QEMU the VM's QEMU runs as an unprivileged user, with no
// capability at all, no_new_privs and a seccomp filter (-sandbox on).
func TestHardenBackendProcesses(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	execOK(t, d, sb, "true")
	var found int
	roles := map[string]int{}
	for pid, args := range backendProcs(d.stateDir()) {
		if !strings.Contains(strings.Join(args, " "), sb.id) {
			continue
		}
		st, err := procStatus(pid)
		if err != nil {
			continue // gone meanwhile
		}
		found++
		role := filepath.Base(args[0])
		for _, a := range args[1:] {
			if a == "boot" || a == "gofer" {
				role += " " + a
			}
		}
		if backend() == "gvisor" && role == filepath.Base(args[0]) {
			// A runsc command of the daemon's own (state, kill,
			// checkpoint), come and gone with the call: not the sandbox.
			continue
		}
		roles[role]++
		own := ownNamespaces(pid)
		uidMap, _ := os.ReadFile("/proc/" + pid + "/uid_map")
		t.Logf("%s (pid %s): %v; namespaces of its own: %v; uid_map %q; open files: %v", role, pid, st, own,
			strings.Join(strings.Fields(string(uidMap)), " "), openFiles(pid))
		if st["Seccomp"] != "2" {
			t.Errorf("%s (pid %s) runs without a seccomp filter: Seccomp %q", role, pid, st["Seccomp"])
		}
		if backend() == "gvisor" {
			// Measured with the pinned runsc (scripts/install-deps.sh, docs/SECURITY.md):
			// the gofer CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID
			// and SYS_CHROOT; the sandbox the same five and SYS_PTRACE
			// (systrap's stubs) instead of SYS_CHROOT. More is a
			// regression to review.
			allowed := uint64(0x4001f)
			if strings.Contains(role, "boot") {
				allowed = 0x8001f
			}
			eff, err := strconv.ParseUint(st["CapEff"], 16, 64)
			if err != nil || eff&^allowed != 0 || st["NoNewPrivs"] != "1" {
				t.Errorf("%s (pid %s): CapEff %s (more than %x) or no no_new_privs: %v", role, pid, st["CapEff"], allowed, st)
			}
			for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts"} {
				if !slices.Contains(own, ns) {
					t.Errorf("%s (pid %s) shares the host's %s namespace", role, pid, ns)
				}
			}
		}
		if backend() == "qemu" {
			if !slices.Contains(own, "net") {
				t.Errorf("QEMU (pid %s) shares the host's network namespace", pid)
			}
			if strings.HasPrefix(st["Uid"], "0 ") || st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" ||
				st["CapBnd"] != "0000000000000000" || st["NoNewPrivs"] != "1" {
				t.Errorf("QEMU (pid %s) is privileged: %v", pid, st)
			}
		}
	}
	if found == 0 {
		t.Fatalf("no backend process of sandbox %s", sb.id)
	}
	if backend() == "gvisor" && (roles["runsc-sandbox boot"] != 1 || roles["runsc-gofer gofer"] != 1) {
		t.Errorf("sandbox %s's runsc processes: %v, want one sandbox and one gofer", sb.id, roles)
	}
}

// TestHardenVMUIDs: with --qemu-uids every VM's QEMU runs as a host uid of
// its own, which owns its directory; no VM can enter another's. Clones of
// one snapshot, each its own uid, all read its shared RAM file and disk.
// A restarted daemon knows which uids its VMs hold, and a dead VM's uid is
// handed out again.
func TestHardenVMUIDs(t *testing.T) {
	if backend() != "qemu" {
		t.Skip("one uid per VM is the QEMU backend's (--qemu-uids); gVisor's processes are checked by TestHardenBackendProcesses")
	}
	const base, count = 300000, 3
	d, err := startDaemon(filepath.Join(suite.tmp, "vm-uids"), "--qemu-uids", strconv.Itoa(base)+":"+strconv.Itoa(count))
	if err != nil {
		t.Fatal(err)
	}
	before := countResources(t, d.stateDir())
	defer func() {
		d.stop()
		waitResources(t, d.stateDir(), before)
	}()
	ctx := context.Background()
	tag := "uids-" + randomHex(3)
	if _, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag, MemoryMiB: 256, PoolSize: intp(0)}); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, d.logTail())
	}
	sbs := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag, N: 2})
	uidOf := func(id string) int {
		t.Helper()
		for pid, args := range backendProcs(d.stateDir()) {
			if !strings.Contains(strings.Join(args, " "), "/"+id+"/") {
				continue
			}
			st, err := procStatus(pid)
			if err != nil {
				t.Fatal(err)
			}
			uid, gid := procIDs(t, pid)
			if uid < base || uid >= base+count || gid != uid || st["CapEff"] != "0000000000000000" {
				t.Errorf("VM %s's QEMU: %v, want a uid of the range, the same gid, no capability", id, st)
			}
			var dir syscall.Stat_t
			if err := syscall.Stat(filepath.Join(d.stateDir(), "sandboxes", id), &dir); err != nil || int(dir.Uid) != uid || dir.Mode&0o077 != 0 {
				t.Errorf("VM %s's directory: owner %d mode %o (%v), want %d's alone", id, dir.Uid, dir.Mode&0o777, err, uid)
			}
			return uid
		}
		t.Fatalf("no QEMU of VM %s", id)
		return 0
	}
	a, b := uidOf(sbs[0].id), uidOf(sbs[1].id)
	t.Logf("VM %s runs as uid %d, VM %s as %d", sbs[0].id, a, sbs[1].id, b)
	if a == b {
		t.Fatalf("both VMs run as uid %d", a)
	}
	for _, sb := range sbs {
		execOK(t, d, sb, "head -c 16M /dev/urandom > /work/x && echo ok")
	}
	// One VM's uid cannot look into the other's directory, nor open its disk.
	other := filepath.Join(d.stateDir(), "sandboxes", sbs[1].id)
	for _, probe := range [][]string{{"ls", other}, {"test", "-r", filepath.Join(other, "agent.sock")}, {"sh", "-c", "cat " + other + "/disk-*.qcow2 >/dev/null"}} {
		cmd := append([]string{"--reuid=" + strconv.Itoa(a), "--regid=" + strconv.Itoa(a), "--clear-groups"}, probe...)
		if out, err := exec.Command("setpriv", cmd...).CombinedOutput(); err == nil {
			t.Errorf("uid %d (VM %s): %v succeeded: %s", a, sbs[0].id, probe, out)
		}
	}

	// Restarted, the daemon knows both uids are taken: a new VM gets the
	// range's third.
	d.kill9()
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	if err := d.waitRecovered(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		execOK(t, d, sb, "cat /work/x > /dev/null")
	}
	c := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag})[0]
	if u := uidOf(c.id); u == a || u == b {
		t.Errorf("a VM made after the restart runs as uid %d, which VM %s holds", u, map[int]string{a: sbs[0].id, b: sbs[1].id}[u])
	}
	// The range is full; a VM that goes gives its uid to the next.
	if err := d.c.DeleteSandbox(ctx, sbs[0].id); err != nil {
		t.Fatal(err)
	}
	next := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag})[0]
	if u := uidOf(next.id); u != a {
		t.Errorf("after VM %s (uid %d) went, the next VM runs as uid %d, want %d", sbs[0].id, a, u, a)
	}
	execOK(t, d, next, "true")
	for _, sb := range []sandbox{sbs[1], c, next} {
		d.c.DeleteSandbox(ctx, sb.id)
	}
	deleteSnapshotEventually(t, d, tag)
}
