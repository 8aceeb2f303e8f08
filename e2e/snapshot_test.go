package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func intp(n int) *int { return &n }

// newSnapshot builds a snapshot on d, deleted at the end of the test.
func newSnapshot(t *testing.T, d *daemon, pool int) string {
	t.Helper()
	tag := "t-" + randomHex(4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	info, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag, PoolSize: intp(pool)})
	if err != nil {
		t.Fatalf("build snapshot: %v\n%s", err, d.logTail())
	}
	if info.Tag != tag || info.Depth != 0 || info.SizeBytes == 0 || info.Backend == "" {
		t.Fatalf("snapshot info %+v", info)
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, tag) })
	return tag
}

// deleteSnapshotEventually deletes a snapshot once the test's sandboxes,
// killed by their own cleanups, are gone.
func deleteSnapshotEventually(t *testing.T, d *daemon, tag string) {
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := d.c.DeleteSnapshot(ctx, tag)
		if err == nil || errors.Is(err, client.ErrNotFound) {
			return
		}
		if !errors.Is(err, client.ErrConflict) || time.Now().After(deadline) {
			t.Errorf("delete snapshot %s: %v", tag, err)
			return
		}
		// Children of this snapshot are still alive: kill them.
		list, _ := d.c.ListSandboxes(ctx)
		for _, sb := range list {
			if sb.SnapshotTag == tag {
				d.c.DeleteSandbox(ctx, sb.ID)
			}
		}
	}
}

func spawn(t *testing.T, d *daemon, tag string, n int) []sandbox {
	t.Helper()
	sbs := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag, N: n})
	t.Cleanup(func() {
		for _, sb := range sbs {
			d.c.DeleteSandbox(context.Background(), sb.id)
		}
	})
	return sbs
}

func evalOK(t *testing.T, d *daemon, sb sandbox, code string) string {
	t.Helper()
	res, err := d.c.Eval(context.Background(), sb.id, sb.token, apitype.EvalRequest{Code: code})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("eval %q in %s: %+v %v", code, sb.id, res, err)
	}
	return res.Result
}

// TestSpawnFixups: children of one snapshot differ in RNG state, identity
// and token, and have the right clock at once.
func TestSpawnFixups(t *testing.T) {
	d := suite.shared
	tag := newSnapshot(t, d, 0)
	kids := spawn(t, d, tag, 2)
	if kids[0].id == kids[1].id || kids[0].token == kids[1].token {
		t.Fatalf("children share an id or token: %+v", kids)
	}
	seen := map[string]string{}
	for _, k := range kids {
		out := execOK(t, d, k, `python3 -c "import os,time,socket;print(os.urandom(8).hex(), socket.gethostname(), time.time())"`)
		f := strings.Fields(out)
		if len(f) != 3 {
			t.Fatalf("child %s printed %q", k.id, out)
		}
		if prev, ok := seen[f[0]]; ok {
			t.Fatalf("children %s and %s read the same urandom bytes %s", prev, k.id, f[0])
		}
		seen[f[0]] = k.id
		if f[1] != k.id {
			t.Errorf("child %s has hostname %s", k.id, f[1])
		}
		guest, _ := strconv.ParseFloat(f[2], 64)
		if skew := guest - float64(time.Now().UnixNano())/1e9; skew > 2 || skew < -2 {
			t.Errorf("child %s clock is off by %.1fs", k.id, skew)
		}
		r := evalOK(t, d, k, "import random; random.random()")
		if prev, ok := seen[r]; ok {
			t.Fatalf("children %s and %s drew the same random.random() %s", prev, k.id, r)
		}
		seen[r] = k.id
	}
}

// TestBranchDiverges: a branch carries the source's memory, processes and
// files into every child; afterwards each goes its own way.
func TestBranchDiverges(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	src := spawn(t, d, newSnapshot(t, d, 0), 1)[0]
	evalOK(t, d, src, "state = {'n': 1}")
	execOK(t, d, src, "echo before > /work/f; (while true; do echo tick >> /tmp/ticks; sleep 0.1; done) >/dev/null 2>&1 &")
	res, err := d.c.Branch(ctx, src.id, src.token, apitype.BranchRequest{N: 2})
	if err != nil {
		t.Fatalf("branch: %v\n%s", err, d.logTail())
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, res.Tag) })
	if res.BranchedFrom != src.id || res.Depth != 1 || res.PauseMs <= 0 || res.StoppedMs <= 0 || len(res.Children) != 2 {
		t.Fatalf("branch response %+v", res)
	}
	var kids []sandbox
	for _, c := range res.Children {
		if c.Token == "" {
			t.Fatalf("child %s came without a token", c.ID)
		}
		kids = append(kids, sandbox{c.ID, c.Token})
		defer d.c.DeleteSandbox(ctx, c.ID)
	}
	// Diverge: the source and one child change; nothing crosses over.
	evalOK(t, d, src, "state['n'] = 100")
	execOK(t, d, src, "echo source-after > /work/f")
	evalOK(t, d, kids[0], "state['n'] = 2")
	execOK(t, d, kids[0], "echo child0-after > /work/f")
	for i, want := range []struct{ n, f string }{{"2", "child0-after\n"}, {"1", "before\n"}} {
		k := kids[i]
		if got := evalOK(t, d, k, "state['n']"); got != want.n {
			t.Errorf("child %d: state['n'] = %s, want %s", i, got, want.n)
		}
		if got := execOK(t, d, k, "cat /work/f"); got != want.f {
			t.Errorf("child %d: /work/f = %q, want %q", i, got, want.f)
		}
		// The background loop started in the source runs on in the child.
		n1 := execOK(t, d, k, "wc -l < /tmp/ticks")
		time.Sleep(500 * time.Millisecond)
		if n2 := execOK(t, d, k, "wc -l < /tmp/ticks"); n2 == n1 {
			t.Errorf("child %d: the background process does not run (%s ticks both times)", i, strings.TrimSpace(n1))
		}
	}
	if got := evalOK(t, d, src, "state['n']"); got != "100" {
		t.Errorf("source: state['n'] = %s after children changed theirs", got)
	}
}

// TestChainDepth: branch of a branch, five deep; the deepest snapshot
// holds every level's writes and spawns like the first.
func TestChainDepth(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	cur := spawn(t, d, newSnapshot(t, d, 0), 1)[0]
	for depth := 1; depth <= 5; depth++ {
		execOK(t, d, cur, fmt.Sprintf("echo %d >> /work/levels", depth))
		res, err := d.c.Branch(ctx, cur.id, cur.token, apitype.BranchRequest{N: 1})
		if err != nil {
			t.Fatalf("branch at depth %d: %v", depth, err)
		}
		t.Cleanup(func() { deleteSnapshotEventually(t, d, res.Tag) })
		if res.Depth != depth {
			t.Fatalf("branch of depth %d reports depth %d", depth, res.Depth)
		}
		cur = sandbox{res.Children[0].ID, res.Children[0].Token}
		t.Cleanup(func() { d.c.DeleteSandbox(ctx, cur.id) })
	}
	if got := execOK(t, d, cur, "cat /work/levels | tr '\\n' ' '"); got != "1 2 3 4 5 " {
		t.Fatalf("depth-5 child sees levels %q", got)
	}
}

// TestWarmPool: a snapshot with a pool hands out ready sandboxes and
// refills the pool in the background.
func TestWarmPool(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	tag := newSnapshot(t, d, 2)
	waitPool := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			info, err := d.c.GetSnapshot(ctx, tag)
			if err == nil && info.PoolReady == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool of %s: %+v, %v; want %d ready", tag, info, err, want)
			}
		}
	}
	waitPool(2)
	kids := spawn(t, d, tag, 2)
	for _, k := range kids {
		if out := execOK(t, d, k, "hostname"); out != k.id+"\n" {
			t.Errorf("pooled child %s has hostname %q", k.id, out)
		}
	}
	waitPool(2)
	if info, _ := d.c.GetSnapshot(ctx, tag); info.Children != 2 {
		t.Errorf("snapshot reports %d children, want 2", info.Children)
	}
}

// TestSnapshotRules: tags, conflicts, n bounds and delete protection.
func TestSnapshotRules(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	tag := newSnapshot(t, d, 0)
	kid := spawn(t, d, tag, 1)[0]
	before, _ := d.c.ListSnapshots(ctx)

	cases := []struct {
		name string
		err  error
		call func() error
	}{
		{"duplicate tag", client.ErrConflict, func() error {
			_, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag})
			return err
		}},
		{"bad tag", client.ErrBadRequest, func() error {
			_, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "../x"})
			return err
		}},
		{"failing warm command", client.ErrBadRequest, func() error {
			_, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "w-" + randomHex(3), Warm: "exit 7"})
			return err
		}},
		{"n too large", client.ErrBadRequest, func() error {
			_, err := d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag, N: 1001})
			return err
		}},
		{"n negative", client.ErrBadRequest, func() error {
			_, err := d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag, N: -1})
			return err
		}},
		{"spawn unknown snapshot", client.ErrNotFound, func() error {
			_, err := d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "no-such-tag"})
			return err
		}},
		{"branch unknown sandbox", client.ErrNotFound, func() error {
			_, err := d.c.Branch(ctx, "sb-000000000000", kid.token, apitype.BranchRequest{})
			return err
		}},
		{"branch onto a taken tag", client.ErrConflict, func() error {
			_, err := d.c.Branch(ctx, kid.id, kid.token, apitype.BranchRequest{Tag: tag})
			return err
		}},
		{"branch n too large", client.ErrBadRequest, func() error {
			_, err := d.c.Branch(ctx, kid.id, kid.token, apitype.BranchRequest{N: 1001})
			return err
		}},
		{"snapshot with n", client.ErrBadRequest, func() error {
			_, err := d.c.SnapshotSandbox(ctx, kid.id, kid.token, apitype.BranchRequest{N: 1})
			return err
		}},
		{"delete while a child lives", client.ErrConflict, func() error {
			return d.c.DeleteSnapshot(ctx, tag)
		}},
		{"delete unknown", client.ErrNotFound, func() error {
			return d.c.DeleteSnapshot(ctx, "no-such-tag")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
		})
	}
	if after, _ := d.c.ListSnapshots(ctx); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused calls changed the snapshots:\nbefore %+v\nafter  %+v", before, after)
	}

	// snapshot (no children) of the child, then the rules for deleting.
	res, err := d.c.SnapshotSandbox(ctx, kid.id, kid.token, apitype.BranchRequest{Tag: tag + "-saved"})
	if err != nil || res.Tag != tag+"-saved" || res.Parent != tag || len(res.Children) != 0 {
		t.Fatalf("snapshot sandbox = %+v, %v", res, err)
	}
	if err := d.c.DeleteSandbox(ctx, kid.id); err != nil {
		t.Fatal(err)
	}
	// The parent can go: the saved snapshot is a whole checkpoint.
	if err := d.c.DeleteSnapshot(ctx, tag); err != nil {
		t.Fatalf("delete after the child is gone: %v", err)
	}
	if _, err := d.c.GetSnapshot(ctx, tag); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("deleted snapshot: %v", err)
	}
	// Spawning from it takes the token of the sandbox it was saved from,
	// which outlives that sandbox.
	grandkid := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag + "-saved", SandboxToken: kid.token})[0]
	execOK(t, d, grandkid, "true")
	d.c.DeleteSandbox(ctx, grandkid.id)
	deleteSnapshotEventually(t, d, tag+"-saved")
}
