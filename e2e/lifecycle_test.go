package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// runscProcsFor counts the backend's processes (runsc or QEMU) that
// belong to one sandbox.
func runscProcsFor(t *testing.T, id string) int {
	t.Helper()
	n := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && isBackendProc(strings.Split(string(b), "\x00")) && strings.Contains(string(b), id) {
			n++
		}
	}
	return n
}

func TestTTLExpiryAndExtend(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	// Both live long enough to be set up however slowly they boot; the
	// doomed one is then cut short with extend, which also shortens.
	const ttl = 3
	sbs := create(t, d, apitype.CreateSandboxRequest{N: 2, TTLSecs: 300})
	doomed, kept := sbs[0], sbs[1]
	defer d.c.DeleteSandbox(ctx, kept.id)
	execOK(t, d, doomed, "sleep 1000 > /dev/null 2>&1 &")
	if runscProcsFor(t, doomed.id) == 0 {
		t.Fatal("no runsc process found for a running sandbox")
	}
	before, _ := d.c.GetSandbox(ctx, kept.id)
	info, err := d.c.Extend(ctx, kept.id, 600)
	if err != nil {
		t.Fatal(err)
	}
	if info.ExpiresAtUnix < before.ExpiresAtUnix+100 {
		t.Fatalf("extend moved expiry from %d to %d", before.ExpiresAtUnix, info.ExpiresAtUnix)
	}
	if _, err := d.c.Extend(ctx, doomed.id, ttl); err != nil {
		t.Fatalf("extend to shorten: %v", err)
	}
	if doomedInfo, err := d.c.GetSandbox(ctx, doomed.id); err == nil {
		time.Sleep(time.Until(time.Unix(doomedInfo.ExpiresAtUnix, 0)) + time.Second)
	} else {
		time.Sleep(time.Duration(ttl+1) * time.Second)
	}
	if _, err := d.c.GetSandbox(ctx, doomed.id); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("expired sandbox: GET = %v, want not found", err)
	}
	if _, err := d.c.Exec(ctx, doomed.id, doomed.token, apitype.ExecRequest{Args: []string{"true"}}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("expired sandbox: exec = %v, want not found", err)
	}
	for deadline := time.Now().Add(10 * time.Second); runscProcsFor(t, doomed.id) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of the expired sandbox still run")
		}
	}
	if out := execOK(t, d, kept, "echo alive"); out != "alive\n" {
		t.Fatalf("extended sandbox: %q", out)
	}
}

// TestParallelNoLeak: 20 sandboxes, 50 execs each, all at once; afterwards
// nothing is left on the host.
func TestParallelNoLeak(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	base := countResources(t, d.stateDir())
	nSandboxes, nExecs := 20, 50
	if backend() == "qemu" {
		nSandboxes = 8 // 20 concurrent TCG boots on 2 cores outlast the 60 s start timeout
	}
	var wg sync.WaitGroup
	errs := make(chan error, nSandboxes)
	for i := range nSandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos, err := d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{MemoryMiB: 256})
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			sb := infos[0]
			defer d.c.DeleteSandbox(ctx, sb.ID)
			for j := range nExecs {
				want := fmt.Sprintf("%d-%d", i, j)
				res, err := d.c.Exec(ctx, sb.ID, sb.Token, apitype.ExecRequest{Args: []string{"echo", want}})
				if err != nil || res.Stdout != want+"\n" || res.ExitCode != 0 {
					errs <- fmt.Errorf("sandbox %d exec %d: %+v %v", i, j, res, err)
					return
				}
			}
			if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
				errs <- fmt.Errorf("delete %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitResources(t, d.stateDir(), base)
}

// TestDaemonKilled kills the daemon with SIGKILL while it creates and runs
// sandboxes, restarts it, and checks that every sandbox is either back and
// working or gone, and that nothing leaked.
func TestDaemonKilled(t *testing.T) {
	dir := filepath.Join(suite.tmp, "killed")
	d, err := startDaemon(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := countResources(t, d.stateDir())
	snapTag := "k-" + randomHex(3)
	if _, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: snapTag, PoolSize: intp(0)}); err != nil {
		t.Fatal(err)
	}
	survivors := create(t, d, apitype.CreateSandboxRequest{N: 2})
	for _, sb := range survivors {
		if _, err := d.c.PutFile(ctx, sb.id, sb.token, "note", 0o644, strings.NewReader("kept "+sb.id), -1); err != nil {
			t.Fatal(err)
		}
	}
	// Work in flight when the daemon dies: a burst of creates and execs.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 2})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			if _, err := d.c.Exec(ctx, survivors[0].id, survivors[0].token, apitype.ExecRequest{Args: []string{"true"}}); err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	d.kill9()
	wg.Wait()

	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.stop()
		waitResources(t, d.stateDir(), base)
	}()
	list, err := d.c.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, sb := range list {
		ids[sb.ID] = true
		if sb.Status != apitype.StatusRunning {
			t.Errorf("after restart sandbox %s is %s", sb.ID, sb.Status)
		}
	}
	for _, sb := range survivors {
		if !ids[sb.id] {
			t.Fatalf("sandbox %s that was running before the kill is gone", sb.id)
		}
		if out := execOK(t, d, sb, "cat note"); out != "kept "+sb.id {
			t.Fatalf("sandbox %s after restart: %q", sb.id, out)
		}
	}
	// Snapshots survive too.
	kid := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: snapTag})[0]
	execOK(t, d, kid, "true")
	list = append(list, apitype.SandboxInfo{ID: kid.id})
	// Whatever was half-made is gone: one directory, two namespaces and
	// some runsc processes per listed sandbox, nothing more.
	r := countResources(t, d.stateDir())
	if r.Dirs != len(list) {
		t.Fatalf("after restart: %d sandbox dirs for %d sandboxes (%+v)", r.Dirs, len(list), r)
	}
	if r.Netns-base.Netns != netnsPerSandbox()*len(list) {
		t.Fatalf("after restart: %d namespaces for %d sandboxes", r.Netns-base.Netns, len(list))
	}
}
