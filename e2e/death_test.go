package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// traces counts what sandbox id holds on the host: the backend's
// processes, its network namespaces and its cgroup directories.
func traces(t *testing.T, id string) (procs, netns, cgroups int) {
	t.Helper()
	ns, _ := filepath.Glob("/var/run/netns/cove-" + id + "-*")
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/cove/" + id)
	v2, _ := filepath.Glob("/sys/fs/cgroup/cove/" + id)
	return runscProcsFor(t, id), len(ns), len(v1) + len(v2)
}

// waitGone waits until sandbox id holds nothing on the host.
func waitGone(t *testing.T, id string) {
	t.Helper()
	var p, n, c int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p, n, c = traces(t, id); p+n+c == 0 {
			return
		}
	}
	t.Fatalf("dead sandbox %s still holds %d processes, %d namespaces, %d cgroups", id, p, n, c)
}

// waitDead polls GET until sandbox id is dead, and fails the test if it
// is not by deadline.
func waitDead(t *testing.T, d *daemon, id string, deadline time.Time) apitype.SandboxInfo {
	t.Helper()
	for {
		info, err := d.c.GetSandbox(context.Background(), id)
		if err == nil && info.Status == apitype.StatusDead {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: GET = %+v, %v; want it dead by now\ndaemon log:\n%s", id, info, err, d.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killInit is the shell that ends a sandbox from inside: kill -9 1. Under
// gVisor init (the agent) dies and the sandbox with it. A Linux guest's
// kernel (QEMU) drops a SIGKILL its init gets from inside, so there every
// other process goes too, the agent's server among them, whose end ends
// init: the guest panics and QEMU exits.
func killInit() string {
	if backend() == "qemu" {
		return "kill -9 1; kill -9 -1"
	}
	return "kill -9 1"
}

// TestKillInit: kill -9 1 inside makes the sandbox dead within moments:
// GET and cove ls say so, calls answer 410 at once, and everything it
// held on the host is gone.
func TestKillInit(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	sb := newSandbox(t)
	if p, n, c := traces(t, sb.id); p == 0 || n == 0 || c == 0 {
		t.Fatalf("a running sandbox holds %d processes, %d namespaces, %d cgroups", p, n, c)
	}
	t0 := time.Now()
	_, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: killInit(), TimeoutSecs: 30})
	// The call its sandbox died under says so.
	if !errors.Is(err, client.ErrGone) {
		t.Errorf("exec of %q = %v, want 410: the sandbox died", killInit(), err)
	}
	info := waitDead(t, d, sb.id, t0.Add(3*time.Second))
	t.Logf("dead %v after kill -9 1: %+v", time.Since(t0).Round(time.Millisecond), info)
	if info.DeadReason != apitype.DeadExited || info.DiedAtUnix == 0 {
		t.Errorf("dead sandbox = %+v, want reason %q and a time of death", info, apitype.DeadExited)
	}

	t1 := time.Now()
	_, err = d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Args: []string{"true"}})
	if took := time.Since(t1); !errors.Is(err, client.ErrGone) || !strings.Contains(err.Error(), "dead") || took > time.Second {
		t.Errorf("exec in the dead sandbox = %v after %v, want 410 saying it is dead within 1s", err, took)
	}
	if _, err := d.c.Ping(ctx, sb.id, sb.token); !errors.Is(err, client.ErrGone) {
		t.Errorf("ping of the dead sandbox = %v, want 410", err)
	}

	ls := exec.Command(suite.bin, "ls", "--url", d.url, "--api-key", d.key)
	ls.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir()) // its token store is the test's
	out, err := ls.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dead (exited)") {
		t.Errorf("cove ls: %v\n%s\nwant the sandbox dead (exited)", err, out)
	}
	waitGone(t, sb.id)
}

// TestOOMKill: a sandbox the host's OOM killer ends at its memory limit is
// dead, and says so. Under gVisor, files in /tmp (the sandbox kernel's own
// tmpfs) are memory of runsc's sandbox process, which the OOM killer then
// picks. Under QEMU the guest's kernel enforces the guest's memory itself
// and its OOM killer ends a process inside, never the VM; the host's is
// provoked here by tightening the VM's memory cgroup to what it uses, as a
// host short of memory would.
func TestOOMKill(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	mem := 128
	if backend() == "qemu" {
		mem = 256
	}
	sb := create(t, d, apitype.CreateSandboxRequest{MemoryMiB: mem})[0]
	t.Cleanup(func() { d.c.DeleteSandbox(ctx, sb.id) })
	fill := "dd if=/dev/zero of=/tmp/fill bs=1M count=1024"
	if backend() == "qemu" {
		tightenMemory(t, sb.id, 16<<20)
		fill = `python3 -c 'a = bytearray(200 << 20)'`
	}
	t0 := time.Now()
	_, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: fill, TimeoutSecs: 60})
	if !errors.Is(err, client.ErrGone) {
		t.Errorf("exec of %q = %v, want 410: the sandbox died", fill, err)
	}
	info := waitDead(t, d, sb.id, time.Now().Add(3*time.Second))
	t.Logf("dead %v after the fill began: %+v", time.Since(t0).Round(time.Millisecond), info)
	if info.DeadReason != apitype.DeadOOMKilled {
		t.Errorf("dead sandbox = %+v, want reason %q", info, apitype.DeadOOMKilled)
	}
	_, err = d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Args: []string{"true"}})
	if !errors.Is(err, client.ErrGone) || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("exec in the OOM-killed sandbox = %v, want 410 naming the OOM killer", err)
	}
	waitGone(t, sb.id)
}

// tightenMemory sets the memory limit of sandbox id's cgroup to what it
// uses now plus headroom.
func tightenMemory(t *testing.T, id string, headroom int64) {
	t.Helper()
	usage, limit := "/sys/fs/cgroup/memory/cove/"+id+"/memory.usage_in_bytes", "/sys/fs/cgroup/memory/cove/"+id+"/memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		usage, limit = "/sys/fs/cgroup/cove/"+id+"/memory.current", "/sys/fs/cgroup/cove/"+id+"/memory.max"
	}
	b, err := os.ReadFile(usage)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(limit, []byte(strconv.FormatInt(n+headroom, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRestartWithDeadSandboxes: the daemon is SIGKILLed, and then so are
// the runtime processes of five of its six sandboxes. The restarted daemon
// answers /healthz at once, finds those five dead (and lets go of what
// they held), and the sixth works as before.
func TestRestartWithDeadSandboxes(t *testing.T) {
	d, err := startDaemon(filepath.Join(suite.tmp, "restart-dead"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := countResources(t, d.stateDir())
	// Spawned from a snapshot: six cold boots take QEMU under TCG far longer.
	t0 := time.Now()
	tag := "rd-" + randomHex(3)
	if _, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag, Warm: "true", MemoryMiB: 256, PoolSize: intp(0)}); err != nil {
		t.Fatal(err)
	}
	sbs := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag, N: 6})
	doomed, kept := sbs[:5], sbs[5]
	t.Logf("six sandboxes in %v", time.Since(t0).Round(time.Millisecond))

	d.kill9()
	for _, sb := range doomed {
		killProcs(t, sb.id)
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.stop()
		waitResources(t, d.stateDir(), base)
	}()
	t.Logf("restart to /healthz with %d dead sandboxes recorded: %v", len(doomed), d.healthyAfter.Round(time.Millisecond))
	if d.healthyAfter > 2*time.Second {
		t.Errorf("the restarted daemon answered /healthz after %v, want within 2s", d.healthyAfter)
	}
	for _, sb := range doomed {
		info := waitDead(t, d, sb.id, time.Now().Add(10*time.Second))
		if info.DeadReason != apitype.DeadExited {
			t.Errorf("sandbox %s = %+v, want dead: exited", sb.id, info)
		}
		if _, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Args: []string{"true"}}); !errors.Is(err, client.ErrGone) {
			t.Errorf("exec in dead sandbox %s = %v, want 410", sb.id, err)
		}
	}
	if out := execOK(t, d, kept, "echo alive"); out != "alive\n" {
		t.Errorf("the surviving sandbox: %q", out)
	}
	for _, sb := range doomed {
		waitGone(t, sb.id)
	}
}

// killProcs SIGKILLs every process of the backend's that belongs to
// sandbox id and waits until they are gone.
func killProcs(t *testing.T, id string) {
	t.Helper()
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && isBackendProc(strings.Split(string(b), "\x00")) && strings.Contains(string(b), id) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process of sandbox %s to kill", id)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(10 * time.Second); runscProcsFor(t, id) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(fmt.Sprintf("processes of sandbox %s outlived SIGKILL", id))
		}
	}
}
