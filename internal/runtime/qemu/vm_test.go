package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// These tests boot real VMs (under TCG unless COVE_QEMU_ACCEL=kvm). They
// need root, QEMU and an image with VM artifacts (make image-vm); without
// them they skip, except under CI, where a missing prerequisite fails.

func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing prerequisite: "+format, args...)
	}
	t.Skipf(format, args...)
}

func vmRuntime(t *testing.T) (*Runtime, runtime.ImageFiles) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		missing(t, "qemu not installed (make deps-qemu)")
	}
	dir := os.Getenv("COVE_IMAGE_DIR")
	if dir == "" {
		dir = image.DefaultDir
	}
	img, err := image.Resolve(dir, "default")
	vm := image.VMFilesFor(img.Rootfs)
	files := runtime.ImageFiles{Rootfs: img.Rootfs, Kernel: vm.Kernel, Initrd: vm.Initrd, Disk: vm.Disk}
	if err != nil || !vmFilesExist(files) {
		missing(t, "no default image with VM artifacts in %s (make image-vm)", dir)
	}
	state := t.TempDir()
	r, err := New(Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})), Dir: filepath.Join(state, "vms"), Accel: os.Getenv("COVE_QEMU_ACCEL"), User: os.Getenv("COVE_QEMU_USER")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids, _ := r.List(context.Background())
		for _, id := range ids {
			r.Destroy(context.Background(), id)
		}
	})
	return r, files
}

func agent(t *testing.T, r *Runtime, id string, within time.Duration) *agentproto.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		conn, err := r.Dial(ctx, id)
		if err == nil {
			c, err := agentproto.NewClient(conn)
			if err == nil {
				pctx, pc := context.WithTimeout(ctx, 2*time.Second)
				_, err = c.Ping(pctx)
				pc()
				if err == nil {
					return c
				}
				c.Close()
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("agent of %s did not answer within %s: %v\nconsole: %s\nqemu: %s", id, within, err, fsutil.Tail(r.vmDir(id).consoleLog(), logTail), r.vmDir(id).tail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sh(t *testing.T, c *agentproto.Client, cmd string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), agentproto.ExecRequest{Shell: cmd, TimeoutMs: 60000})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s", cmd, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

func TestVMLifecycle(t *testing.T) {
	r, files := vmRuntime(t)
	ctx := context.Background()
	spec := runtime.Spec{ID: "vm-a", ImageFiles: files, CPUs: 1, MemoryMiB: 512, Hostname: "vm-a", Golden: true}
	t0 := time.Now()
	if err := r.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	c := agent(t, r, "vm-a", 20*time.Second)
	t.Logf("cold boot to agent: %v", time.Since(t0))
	if got := sh(t, c, "hostname; echo hello > /root/f; sync; cat /root/f"); got != "vm-a\nhello" {
		t.Fatalf("got %q", got)
	}
	c.Close()

	snap := filepath.Join(t.TempDir(), "snap")
	pause, err := r.Checkpoint(ctx, "vm-a", snap, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("golden checkpoint: %v", pause)
	r.Destroy(ctx, "vm-a")

	// Each clone's first reply, broken down: the runtime's restore, the
	// first ping, the service's Restored call and the first exec.
	var times, restores, pings, fixups, execs []time.Duration
	var pids []int
	for i := range 5 {
		id := fmt.Sprintf("vm-c%d", i)
		t0 := time.Now()
		if err := r.Restore(ctx, runtime.Spec{ID: id, ImageFiles: files, CPUs: 1, MemoryMiB: 512, Hostname: id}, snap); err != nil {
			t.Fatal(err)
		}
		restores = append(restores, time.Since(t0))
		c := agent(t, r, id, 30*time.Second)
		times = append(times, time.Since(t0))
		pings = append(pings, times[i]-restores[i])
		// What the service does for every clone: seed, identity, clock.
		t1 := time.Now()
		if err := c.Restored(ctx, agentproto.RestoredRequest{SandboxID: id, Hostname: id, Seed: []byte(id), TimeUnixNano: time.Now().UnixNano()}); err != nil {
			t.Fatalf("clone %s: restored: %v", id, err)
		}
		fixups = append(fixups, time.Since(t1))
		t1 = time.Now()
		if got := sh(t, c, "cat /root/f; echo $$ > /root/g; date +%s"); !strings.HasPrefix(got, "hello\n") {
			t.Fatalf("clone %s: %q", id, got)
		} else if d := time.Now().Unix() - parseInt(strings.Split(got, "\n")[1]); d < -2 || d > 2 {
			t.Errorf("clone clock off by %ds", d)
		}
		execs = append(execs, time.Since(t1))
		c.Close()
		st, _ := r.vmDir(id).readState()
		pids = append(pids, st.Pid)
	}
	for _, d := range []struct {
		name string
		v    []time.Duration
	}{{"runtime restore", restores}, {"first ping", pings}, {"Restored", fixups}, {"first exec", execs}} {
		t.Logf("%s: %v", d.name, d.v)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("restore to first reply: %v (p50 %v)", times, times[len(times)/2])
	var total int
	for _, p := range pids {
		total += pss(p)
	}
	t.Logf("Pss per clone: %d MiB", total/len(pids)/1024)

	// Branch chain: each generation branches the previous one live.
	src := "vm-c0"
	for depth := 1; depth <= 5; depth++ {
		c := agent(t, r, src, 10*time.Second)
		sh(t, c, fmt.Sprintf("echo %d >> /root/chain", depth))
		c.Close()
		img := filepath.Join(t.TempDir(), "b")
		pause, err := r.Checkpoint(ctx, src, img, true)
		if err != nil {
			t.Fatalf("branch depth %d: %v", depth, err)
		}
		// The source diverges from the child.
		c = agent(t, r, src, 10*time.Second)
		sh(t, c, "echo source >> /root/chain")
		c.Close()
		child := fmt.Sprintf("vm-b%d", depth)
		t0 := time.Now()
		if err := r.Restore(ctx, runtime.Spec{ID: child, ImageFiles: files, Hostname: child}, img); err != nil {
			t.Fatalf("restore depth %d: %v", depth, err)
		}
		c = agent(t, r, child, 30*time.Second)
		got := sh(t, c, "cat /root/chain | tr '\\n' ' '")
		c.Close()
		t.Logf("depth %d: pause %v, restore %v, chain %q", depth, pause, time.Since(t0), got)
		if f := strings.Fields(got); strings.Contains(got, "source") || len(f) == 0 || f[len(f)-1] != fmt.Sprint(depth) {
			t.Fatalf("depth %d: child sees %q", depth, got)
		}
		src = child
	}
	waitForDeath(t, r, "vm-c1")
	ids, _ := r.List(ctx)
	for _, id := range ids {
		if err := r.Destroy(ctx, id); err != nil {
			t.Error(err)
		}
	}
	if ids, _ := r.List(ctx); len(ids) != 0 {
		t.Fatalf("left after destroy: %v", ids)
	}
}

// waitForDeath kills every process of VM id's guest but init, which then
// exits: the guest panics and QEMU ends, which Wait reports with the
// panic; a live VM's Wait ends with its context.
func waitForDeath(t *testing.T, r *Runtime, id string) {
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := r.Wait(short, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a live VM = %v, want the context's deadline", err)
	}
	done := make(chan error, 1)
	var ex runtime.Exit
	go func() {
		var err error
		ex, err = r.Wait(ctx, id)
		done <- err
	}()
	c := agent(t, r, id, 10*time.Second)
	defer c.Close()
	c.Exec(ctx, agentproto.ExecRequest{Shell: "kill -9 -1"}) // no answer: the agent goes too
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return after the guest's init exited")
	}
	if ex.OOMKilled || !strings.Contains(ex.Detail, "Attempted to kill init") {
		t.Errorf("Wait = %+v, want the guest's panic and no OOM kill", ex)
	}
	if _, err := r.Wait(ctx, "vm-none"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Wait on an unknown VM = %v, want ErrNotFound", err)
	}
}

func parseInt(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// pss returns a process's proportional set size in KiB.
func pss(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Pss:") {
			return int(parseInt(strings.Fields(l)[1]))
		}
	}
	return 0
}
