package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestHostileLimits: what a runaway workload does to a sandbox with
// disk_mib and pids of its own stays inside it. Writing past the disk
// fails with ENOSPC and the host's disk grows by about the limit; a fork
// bomb meets EAGAIN while the host's process count stays bounded; opening
// too many files meets EMFILE. A neighbour answers throughout, the
// sandbox itself survives, and the daemon is healthy after.
func TestHostileLimits(t *testing.T) {
	d := suite.shared
	const diskMiB, pids = 512, 128
	sbs := create(t, d, apitype.CreateSandboxRequest{N: 2, DiskMiB: diskMiB, Pids: pids})
	for _, sb := range sbs {
		defer d.c.DeleteSandbox(context.Background(), sb.id)
	}
	victim, neighbour := sbs[0], sbs[1]
	info, err := d.c.GetSandbox(context.Background(), victim.id)
	if err != nil || info.DiskMiB != diskMiB || info.Pids != pids {
		t.Fatalf("GET = %+v, %v; want disk_mib %d and pids %d", info, err, diskMiB, pids)
	}
	neighbourOK := watchNeighbour(t, d, neighbour)

	t.Run("disk", func(t *testing.T) {
		avail := execOK(t, d, victim, "df -m --output=avail / | tail -1")
		if n, _ := strconv.Atoi(strings.TrimSpace(avail)); n < diskMiB*9/10 || n > diskMiB*11/10 {
			t.Errorf("df inside: %s MiB available, want about %d", strings.TrimSpace(avail), diskMiB)
		}
		before := hostUsage(t, d, victim.id)
		res, err := d.c.Exec(context.Background(), victim.id, victim.token, apitype.ExecRequest{
			Shell: "dd if=/dev/zero of=/work/fill bs=4M count=256 oflag=direct", TimeoutSecs: 300})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
			t.Errorf("writing 1 GiB into %d MiB: exit %d, stderr %q; want ENOSPC", diskMiB, res.ExitCode, res.Stderr)
		}
		grew := (hostUsage(t, d, victim.id) - before) >> 20
		t.Logf("writing 1 GiB with disk_mib %d: the host's disk grew by %d MiB", diskMiB, grew)
		if grew > diskMiB+128 || grew < diskMiB/2 {
			t.Errorf("the host's disk grew by %d MiB, want about %d", grew, diskMiB)
		}
		execOK(t, d, victim, "rm /work/fill")
	})

	t.Run("pids", func(t *testing.T) {
		// Under gVisor only the agent may pass the limit (it holds
		// CAP_SYS_RESOURCE for that): no command it runs does, whichever
		// of its threads starts it. (A VM's commands are the guest's root;
		// their limit is a cgroup the agent stays out of.)
		for i := 0; i < 5 && backend() == "gvisor"; i++ {
			caps := execOK(t, d, victim, "grep -E '^Cap(Inh|Prm|Eff)' /proc/self/status")
			for _, line := range strings.Split(strings.TrimSpace(caps), "\n") {
				f := strings.Fields(line)
				if v, err := strconv.ParseUint(f[len(f)-1], 16, 64); err != nil || v&(1<<24) != 0 {
					t.Fatalf("a command holds CAP_SYS_RESOURCE: %s", line)
				}
			}
		}
		// Up to 3000 sleeps, giving up after 50 refusals; those started are
		// held a moment for the count, then killed.
		res, peak, err := forkBomb(context.Background(), d, victim, `import subprocess, time
ps, fails, first = [], 0, 0
for i in range(3000):
    try:
        ps.append(subprocess.Popen(["sleep", "600"]))
    except OSError as e:
        fails, first = fails + 1, first or e.errno
        if fails == 50:
            break
time.sleep(2)
for p in ps:
    p.kill()
for p in ps:
    p.wait()
print(len(ps), fails, first)`)
		if err != nil {
			t.Fatal(err)
		}
		var started, fails, errno int
		fmt.Sscan(res.Stdout, &started, &fails, &errno)
		t.Logf("fork bomb with pids %d: %d started, %d refused (errno %d); the sandbox's host tasks peaked at %d", pids, started, fails, errno, peak)
		if res.ExitCode != 0 || started >= pids || started < pids/2 || errno != int(syscall.EAGAIN) {
			t.Errorf("fork bomb: exit %d, output %q, stderr %q; want fewer than %d started, then EAGAIN", res.ExitCode, res.Stdout, lastLines(res.Stderr), pids)
		}
		// Under gVisor a task costs about two on the host; a VM's cost none.
		if peak > hostTaskFloor(pids) {
			t.Errorf("the sandbox's host tasks peaked at %d, want at most %d", peak, hostTaskFloor(pids))
		}
		if out := execOK(t, d, victim, "echo alive"); out != "alive\n" {
			t.Errorf("the sandbox after the fork bomb: %q", out)
		}
	})

	t.Run("open files", func(t *testing.T) {
		limits, err := d.c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := limits.Limits.OpenFiles
		out := execOK(t, d, victim, fmt.Sprintf(`python3 -c '
import os
fds, err = [], 0
try:
    for i in range(%d):
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    err = e.errno
print(len(fds), err)'`, n+100))
		var opened, errno int
		fmt.Sscan(out, &opened, &errno)
		if opened > n || errno != int(syscall.EMFILE) {
			t.Errorf("opening %d files with open_files %d: %q; want EMFILE at the limit", n+100, n, out)
		}
		if backend() == "gvisor" {
			// The sandbox's own host descriptors are bounded too.
			for pid, lim := range hostFileLimits(d, victim.id) {
				if lim <= 0 || lim > 2*n+1024 {
					t.Errorf("runsc process %s may open %d host files, want at most %d", pid, lim, 2*n+1024)
				}
			}
		}
	})

	// gVisor's process limit is per user: a bomb run by many users passes
	// it and meets the host cgroup's backstop, which the sandbox does not
	// survive but the host's process count never passes. (A VM's limit is
	// its commands' cgroup, whatever their users.) Last: it ends the victim.
	if backend() == "gvisor" {
		t.Run("pids across users", func(t *testing.T) {
			// The call is not waited out: the sandbox dies in a few seconds,
			// and its agent's connection may take longer to say so.
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
			defer cancel()
			_, peak, _ := forkBomb(ctx, d, victim, `import os, subprocess, time
kids = []
for uid in range(1000, 1010):
    pid = os.fork()
    if pid == 0:
        os.setgid(uid)
        os.setuid(uid)
        ps = []
        try:
            for i in range(300):
                ps.append(subprocess.Popen(["sleep", "600"]))
        except OSError:
            pass
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
for p in kids:
    os.waitpid(p, 0)`)
			t.Logf("fork bomb across 10 users with pids %d: the sandbox's host tasks peaked at %d", pids, peak)
			if peak > hostTaskFloor(pids) || peak < pids {
				t.Errorf("the sandbox's host tasks peaked at %d, want between %d and %d", peak, pids, hostTaskFloor(pids))
			}
		})
	}

	neighbourOK.check(t)
	if code, _ := rawCall(t, "GET", d.url+"/healthz", nil, ""); code != http.StatusOK {
		t.Errorf("healthz after the limits: %d", code)
	}
}

// TestMemoryBudget: a create whose memory would take the daemon's
// sandboxes past its budget is refused whole with a 503 naming the
// budget, and makes nothing.
func TestMemoryBudget(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	info, err := d.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := info.Limits
	n := l.MemoryBudgetMiB/l.MaxMemoryMiB + 1
	if l.MemoryBudgetMiB <= 0 || n > l.MaxN || n > l.MaxSandboxes-info.Sandboxes {
		t.Fatalf("limits %+v: no create of at most %d sandboxes of %d MiB exceeds the budget", l, l.MaxN, l.MaxMemoryMiB)
	}
	before, err := d.c.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res := countResources(t, d.stateDir())
	code, body := rawCall(t, "POST", d.url+"/v1/sandboxes", map[string]string{"Authorization": "Bearer " + d.key},
		fmt.Sprintf(`{"n":%d,"memory_mib":%d}`, n, l.MaxMemoryMiB))
	want := fmt.Sprintf("memory budget of %d MiB", l.MemoryBudgetMiB)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), want) {
		t.Errorf("create of %d × %d MiB within a budget of %d MiB: %d %s; want 503 naming the budget", n, l.MaxMemoryMiB, l.MemoryBudgetMiB, code, body)
	}
	after, err := d.c.ListSandboxes(ctx)
	if err != nil || len(after) != len(before) {
		t.Errorf("sandboxes after a refused create: %d, %v; want %d", len(after), err, len(before))
	}
	waitResources(t, d.stateDir(), res)
}

// forkBomb runs a Python fork bomb in sb and returns its result and the
// most host tasks the sandbox had meanwhile.
func forkBomb(ctx context.Context, d *daemon, sb sandbox, script string) (apitype.ExecResponse, int, error) {
	var peak int
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			peak = max(peak, hostTasks(sb.id))
			select {
			case <-pctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	res, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Args: []string{"python3", "-c", script}, TimeoutSecs: 300})
	stop()
	<-done
	return res, peak, err
}

// hostTaskFloor bounds the host tasks of a sandbox of pids tasks: under
// gVisor each costs about two, a VM's none.
func hostTaskFloor(pids int) int { return 2*pids + 256 }

// neighbourWatch runs exec calls in a sandbox back to back until checked.
type neighbourWatch struct {
	stop  context.CancelFunc
	mu    sync.Mutex
	calls int
	slow  time.Duration
	errs  []string
	done  chan struct{}
}

func watchNeighbour(t *testing.T, d *daemon, sb sandbox) *neighbourWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &neighbourWatch{stop: cancel, done: make(chan struct{})}
	t.Cleanup(cancel)
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			t0 := time.Now()
			res, err := d.c.Exec(context.Background(), sb.id, sb.token, apitype.ExecRequest{Shell: "echo ok", TimeoutSecs: 60})
			w.mu.Lock()
			w.calls++
			w.slow = max(w.slow, time.Since(t0))
			if err != nil || res.Stdout != "ok\n" {
				w.errs = append(w.errs, fmt.Sprintf("%+v %v", res, err))
			}
			w.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return w
}

// check stops the watch and fails t unless every call answered.
func (w *neighbourWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("neighbour: %d execs, the slowest in %s", w.calls, w.slow.Round(time.Millisecond))
	if len(w.errs) > 0 || w.calls == 0 {
		t.Errorf("neighbour's execs failed (%d of %d): %v", len(w.errs), w.calls, w.errs)
	}
	if w.slow > 30*time.Second {
		t.Errorf("a neighbour's exec took %s", w.slow)
	}
}

// sandboxDir is where a sandbox's runtime keeps its files on the host.
func sandboxDir(d *daemon, id string) string { return filepath.Join(d.stateDir(), "sandboxes", id) }

// hostUsage is the disk a sandbox holds on the host: the files in its
// directory and the deleted ones its processes hold open there (runsc's
// overlay filestore), each counted once.
func hostUsage(t *testing.T, d *daemon, id string) int64 {
	t.Helper()
	dir := sandboxDir(d, id) + "/"
	seen := map[uint64]bool{}
	var n int64
	add := func(path string) {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
	}
	filepath.Walk(dir, func(path string, _ os.FileInfo, _ error) error { add(path); return nil })
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, dir) && strings.HasSuffix(target, " (deleted)") {
			add(fd)
		}
	}
	return n
}

// sandboxProcs are the host processes of a sandbox's runtime: those whose
// command line names its directory.
func sandboxProcs(d *daemon, id string) []string {
	var pids []string
	dir := sandboxDir(d, id) + "/"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); err == nil && strings.Contains(string(b), dir) {
			pids = append(pids, p.Name())
		}
	}
	return pids
}

// hostTasks counts the host tasks (threads) in a sandbox's cgroup: its
// runtime's, gVisor's stub processes (which have no command line) among
// them.
func hostTasks(id string) int {
	for _, f := range []string{"/sys/fs/cgroup/cpu/cove/" + id + "/tasks", "/sys/fs/cgroup/cove/" + id + "/cgroup.threads"} {
		if b, err := os.ReadFile(f); err == nil {
			return strings.Count(string(b), "\n")
		}
	}
	return 0
}

// hostFileLimits is the soft RLIMIT_NOFILE of each of a sandbox's host
// processes.
func hostFileLimits(d *daemon, id string) map[string]int {
	out := map[string]int{}
	for _, pid := range sandboxProcs(d, id) {
		f, err := os.Open(filepath.Join("/proc", pid, "limits"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
				if fields := strings.Fields(rest); len(fields) > 0 {
					out[pid], _ = strconv.Atoi(fields[0])
				}
			}
		}
		f.Close()
	}
	return out
}

// lastLines is the end of s, for messages.
func lastLines(s string) string {
	if len(s) > 500 {
		return "…" + s[len(s)-500:]
	}
	return s
}
