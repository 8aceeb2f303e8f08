package qemu

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// TestBranchColdVM branches a cold-booted VM (which owns its RAM file)
// while it runs and restores a child from it.
func TestBranchColdVM(t *testing.T) {
	r, files := vmRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, runtime.Spec{ID: "cold", ImageFiles: files, CPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	c := agent(t, r, "cold", 60*time.Second)
	sh(t, c, "echo before > /root/x")
	img := filepath.Join(t.TempDir(), "b")
	pause, err := r.Checkpoint(ctx, "cold", img, true)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, c, "echo source > /root/x") // the old connection survives the branch
	c.Close()
	t0 := time.Now()
	if err := r.Restore(ctx, runtime.Spec{ID: "child", ImageFiles: files}, img); err != nil {
		t.Fatal(err)
	}
	c = agent(t, r, "child", 30*time.Second)
	if got := sh(t, c, "cat /root/x"); got != "before" {
		t.Fatalf("child sees %q", got)
	}
	t.Logf("branch pause %v, child restore %v", pause, time.Since(t0))
}

// TestBranchBusyVM branches a VM while the agent answers pings back to
// back, as the service does to measure the pause: the child must come up
// whole (under TCG a live pre-copy once gave children RAM older than their
// device state).
func TestBranchBusyVM(t *testing.T) {
	r, files := vmRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, runtime.Spec{ID: "busy", ImageFiles: files, CPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	c := agent(t, r, "busy", 60*time.Second)
	pctx, stop := context.WithCancel(ctx)
	pings := make(chan int)
	go func() {
		n := 0
		for pctx.Err() == nil {
			if _, err := c.Ping(pctx); err != nil {
				break
			}
			n++
			time.Sleep(500 * time.Microsecond)
		}
		pings <- n
	}()
	time.Sleep(200 * time.Millisecond)
	img := filepath.Join(t.TempDir(), "b")
	pause, err := r.Checkpoint(ctx, "busy", img, true)
	stop()
	n := <-pings
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(ctx, runtime.Spec{ID: "busy-child", ImageFiles: files}, img); err != nil {
		t.Fatal(err)
	}
	c2 := agent(t, r, "busy-child", 30*time.Second)
	sh(t, c2, "true")
	t.Logf("%d pings during the branch, pause %v", n, pause)
}

// TestBranchChainStaysShort branches one VM again and again: its qcow2
// chain, and so its pause and its snapshots' depth, stays bounded, and
// every snapshot's child sees exactly the writes made before it.
func TestBranchChainStaysShort(t *testing.T) {
	r, files := vmRuntime(t)
	ctx := context.Background()
	if err := r.Start(ctx, runtime.Spec{ID: "deep", ImageFiles: files, CPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	c := agent(t, r, "deep", 60*time.Second)
	var imgs []string
	for i := range 2*maxLayers + 1 {
		// A megabyte per round, so streaming has data to move.
		sh(t, c, fmt.Sprintf("head -c 1M /dev/urandom > /root/blob%d && echo %d >> /root/log && sync", i, i))
		img := filepath.Join(t.TempDir(), "b")
		if _, err := r.Checkpoint(ctx, "deep", img, true); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
		st, err := r.vmDir("deep").readState()
		if err != nil {
			t.Fatal(err)
		}
		// At most maxLayers before a branch, one more after it.
		if len(st.Layers) > maxLayers+1 {
			t.Fatalf("after branch %d the chain is %v", i, st.Layers)
		}
		files, _ := filepath.Glob(r.vmDir("deep").layer("disk-*.qcow2"))
		if len(files) != len(st.Layers) {
			t.Fatalf("after branch %d: layer files %v, chain %v", i, files, st.Layers)
		}
	}
	want := ""
	for i := range imgs {
		want += fmt.Sprintf("%d\n", i)
	}
	if got := sh(t, c, "cat /root/log && md5sum /root/blob* | wc -l"); got != strings.TrimSpace(want)+"\n"+strconv.Itoa(len(imgs)) {
		t.Fatalf("source sees %q", got)
	}
	for _, i := range []int{1, maxLayers, len(imgs) - 1} {
		id := fmt.Sprintf("deep-%d", i)
		if err := r.Restore(ctx, runtime.Spec{ID: id, ImageFiles: files}, imgs[i]); err != nil {
			t.Fatal(err)
		}
		cc := agent(t, r, id, 30*time.Second)
		want := ""
		for j := 0; j <= i; j++ {
			want += fmt.Sprintf("%d\n", j)
		}
		if got := sh(t, cc, "cat /root/log"); got != strings.TrimSpace(want) {
			t.Fatalf("child of branch %d sees %q", i, got)
		}
		cc.Close()
		r.Destroy(ctx, id)
	}
}
