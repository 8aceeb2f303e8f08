package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const sampleRollup = `55d7c3a1e000-7ffc4b5f8000 ---p 00000000 00:00 0                          [rollup]
Rss:               48712 kB
Pss:               21034 kB
Pss_Dirty:         17000 kB
Pss_Anon:          16800 kB
Pss_File:           4234 kB
Pss_Shmem:             0 kB
Shared_Clean:       8012 kB
`

func TestParsePss(t *testing.T) {
	got, err := parsePss([]byte(sampleRollup))
	if err != nil || got != 21034 {
		t.Errorf("parsePss = %d, %v; want 21034", got, err)
	}
	for _, bad := range []string{"", "Rss: 5 kB\n", "Pss_Anon: 5 kB\n", "Pss: lots\n", "Pss: 5 MB\n"} {
		if _, err := parsePss([]byte(bad)); err == nil {
			t.Errorf("parsePss(%q) succeeded", bad)
		}
	}
}

// runscCmdline is how the daemon's runsc processes name a sandbox.
func runscCmdline(id string) string {
	return strings.Join([]string{"runsc-sandbox", "--root=/var/lib/cove/sandboxes/.runsc",
		"--log=/var/lib/cove/sandboxes/" + id + "/runsc.log", "boot",
		"--bundle=/var/lib/cove/sandboxes/" + id + "/bundle", id}, "\x00") + "\x00"
}

func TestSandboxInCmdline(t *testing.T) {
	want := map[string]bool{"sb-0123456789ab": true, "sb-1": true}
	tests := []struct {
		cmdline, id string
	}{
		{runscCmdline("sb-0123456789ab"), "sb-0123456789ab"},
		{"runsc-gofer\x00--log=/d/sb-1/runsc.log\x00gofer\x00", "sb-1"},
		{"runsc-gofer\x00--log=/d/sb-1.log\x00", "sb-1"},
		{"runsc-gofer\x00--log=/d/sb-10/runsc.log\x00", ""}, // another sandbox
		{"xsb-1\x00", ""},
		{"/usr/sbin/cove\x00serve\x00", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := sandboxInCmdline([]byte(tt.cmdline), want); got != tt.id {
			t.Errorf("sandboxInCmdline(%q) = %q, want %q", tt.cmdline, got, tt.id)
		}
	}
}

func TestPssBySandbox(t *testing.T) {
	root := t.TempDir()
	proc := func(pid int, cmdline, rollup string) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644)
		if rollup != "" {
			os.WriteFile(filepath.Join(dir, "smaps_rollup"), []byte(rollup), 0o644)
		}
	}
	proc(100, runscCmdline("sb-a"), "Pss: 1000 kB\n")
	proc(101, "runsc-gofer\x00--log=/d/sb-a/runsc.log\x00", "Pss: 24 kB\n")
	proc(200, runscCmdline("sb-b"), sampleRollup)
	proc(300, runscCmdline("sb-c"), "Pss: 5 kB\n")    // not asked for
	proc(400, runscCmdline("sb-a"), "Pss: 9999 kB\n") // self
	proc(500, runscCmdline("sb-b"), "")               // exited meanwhile
	os.MkdirAll(filepath.Join(root, "self"), 0o755)
	os.WriteFile(filepath.Join(root, "meminfo"), []byte("MemTotal: 1 kB\n"), 0o644)

	got, err := pssBySandbox(root, []string{"sb-a", "sb-b", "sb-d"}, 400)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]pssSum{"sb-a": {kib: 1024, procs: 2}, "sb-b": {kib: 21034, procs: 1}}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: got %+v, want %+v", id, got[id], w)
		}
	}
}

func TestChainRows(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	lat := [][]time.Duration{ms(100, 90, 300), ms(110), ms(120), ms(130), ms(140), ms(150, 140, 500)}
	rows := chainRows(lat, 5, nil)
	if len(rows) != 7 {
		t.Fatalf("got %d rows, want 7: %+v", len(rows), rows)
	}
	for d := range 6 {
		if rows[d].Name != fmt.Sprintf("chain_depth_%d", d) || rows[d].Error != "" {
			t.Errorf("row %d = %+v", d, rows[d])
		}
	}
	if rows[0].P50 != 100 || rows[5].P50 != 150 {
		t.Errorf("medians %v, %v; want 100, 150", rows[0].P50, rows[5].P50)
	}
	if r := rows[6]; r.Name != "chain_depth_5_vs_0" || r.Unit != unitRatio || r.P50 != 1.5 || r.Error != "" {
		t.Errorf("ratio row = %+v", r)
	}

	// Failing at depth 2: 0 and 1 measured, the rest failed.
	rows = chainRows(lat[:2], 5, fmt.Errorf("depth 2: boom"))
	if len(rows) != 7 || rows[1].Error != "" || rows[2].Error != "depth 2: boom" || rows[5].Error == "" || rows[6].Error == "" {
		t.Errorf("partial chain rows = %+v", rows)
	}

	if rows := chainRows(lat[:1], 0, nil); len(rows) != 1 {
		t.Errorf("depth 0 gave %d rows, want 1 (no ratio)", len(rows))
	}
}

func TestAddColdBaseline(t *testing.T) {
	rows := []benchResult{
		{Name: "create", Unit: unitMs, P50: 800, P99: 900, N: 10},
		{Name: "exec", Unit: unitMs, P50: 1, Baseline: &benchBaseline{Name: "runsc exec"}},
		{Name: "spawn", Unit: unitMs, P50: 200},
		{Name: "pool_handout", Unit: unitMs},
		{Name: "spawn_100", Unit: unitMs},
		{Name: "pss_per_child", Unit: unitMiB, Baseline: &benchBaseline{Name: "cold sandbox"}},
		{Name: "branch_pause_50", Unit: unitMs},
		{Name: "chain_depth_3", Unit: unitMs},
		{Name: "chain_depth_5_vs_0", Unit: unitRatio},
		{Name: "spawn", Unit: unitMs, Error: "failed"},
	}
	addColdBaseline(rows)
	for _, r := range rows {
		var got string
		if r.Baseline != nil {
			got = r.Baseline.Name
		}
		want := coldBaselineName
		switch {
		case r.Name == "exec":
			want = "runsc exec"
		case r.Name == "pss_per_child":
			want = "cold sandbox"
		case r.Name == "create", r.Name == "chain_depth_5_vs_0", r.Name == "branch_pause_50", r.Error != "":
			want = ""
		}
		if got != want {
			t.Errorf("%s: baseline %q, want %q", r.Name, got, want)
		}
	}
	if b := rows[2].Baseline; b.P50 != 800 || b.P99 != 900 || b.N != 10 {
		t.Errorf("baseline = %+v", b)
	}
	// Without a create row, nothing changes.
	rows = []benchResult{{Name: "spawn", Unit: unitMs}}
	if addColdBaseline(rows); rows[0].Baseline != nil {
		t.Error("baseline without a create row")
	}
}

func TestSelectGroups(t *testing.T) {
	full := benchOpts{creates: 1, execs: 1, evals: 1, fileMiB: 1, spawns: 1, poolHandouts: 1, spawnN: 1, branches: 1, chainSamples: 1}
	o := full
	if err := o.selectGroups("spawn, chain", ""); err != nil {
		t.Fatal(err)
	}
	if o.spawns != 1 || o.chainSamples != 1 || o.creates != 0 || o.spawnN != 0 || o.fileMiB != 0 || o.branches != 0 {
		t.Errorf("--only spawn,chain: %+v", o)
	}
	o = full
	if err := o.selectGroups("", "spawn100,transfer"); err != nil {
		t.Fatal(err)
	}
	if o.spawnN != 0 || o.fileMiB != 0 || o.spawns != 1 || o.creates != 1 {
		t.Errorf("--skip spawn100,transfer: %+v", o)
	}
	if err := o.selectGroups("spwan", ""); err == nil || !strings.Contains(err.Error(), "spawn100") {
		t.Errorf("unknown group: %v", err)
	}
}

func TestParseMiBList(t *testing.T) {
	got, err := parseMiBList("0, 50,200,")
	if err != nil || !slices.Equal(got, []int{0, 50, 200}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"-1", "50M", "x"} {
		if _, err := parseMiBList(bad); err == nil {
			t.Errorf("parseMiBList(%q) succeeded", bad)
		}
	}
}

// snapFake is an in-memory daemon with snapshots, pools, spawn and
// branch, enough for the snapshot benchmarks' bookkeeping. Each sandbox
// and snapshot carries the text of its /tmp/chain.
type snapFake struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]*fakeSandbox
	snapshots map[string]*fakeSnapshot
	// Sandboxes the fake makes but does not return, as a spawn cut short
	// would.
	dropSpawns bool
	// deletes of snapshots refused with a conflict.
	conflicts int
}

type fakeSandbox struct {
	info  apitype.SandboxInfo
	chain string
}

type fakeSnapshot struct {
	info  apitype.SnapshotInfo
	chain string
}

func newSnapFake() *snapFake {
	return &snapFake{sandboxes: map[string]*fakeSandbox{}, snapshots: map[string]*fakeSnapshot{}}
}

func (f *snapFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(apitype.ErrorBody{Error: msg, Code: code})
	}
	reply := func(status int, v any) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	body, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	switch {
	case path == "/v1/info":
		reply(200, apitype.Info{Version: "test", Backend: "gvisor"})
	case path == "/v1/snapshots" && r.Method == "POST":
		var req apitype.CreateSnapshotRequest
		json.Unmarshal(body, &req)
		if f.snapshots[req.Tag] != nil {
			fail(409, apitype.CodeConflict, "exists")
			return
		}
		si := apitype.SnapshotInfo{Tag: req.Tag, Backend: "gvisor", SizeBytes: 1 << 20}
		if req.PoolSize != nil {
			si.PoolSize = *req.PoolSize
			si.PoolReady = si.PoolSize
		}
		f.snapshots[req.Tag] = &fakeSnapshot{info: si}
		reply(201, si)
	case path == "/v1/snapshots" && r.Method == "GET":
		out := []apitype.SnapshotInfo{}
		for _, s := range f.snapshots {
			out = append(out, s.info)
		}
		reply(200, out)
	case strings.HasPrefix(path, "/v1/snapshots/"):
		tag := strings.TrimPrefix(path, "/v1/snapshots/")
		s := f.snapshots[tag]
		if s == nil {
			fail(404, apitype.CodeNotFound, "no snapshot "+tag)
			return
		}
		if r.Method == "GET" {
			// The pool refills by one per look.
			s.info.PoolReady = min(s.info.PoolReady+1, s.info.PoolSize)
			reply(200, s.info)
			return
		}
		for _, sb := range f.sandboxes {
			if sb.info.SnapshotTag == tag {
				f.conflicts++
				fail(409, apitype.CodeConflict, "in use by "+sb.info.ID)
				return
			}
		}
		for _, o := range f.snapshots {
			if o.info.Parent == tag {
				f.conflicts++
				fail(409, apitype.CodeConflict, "parent of "+o.info.Tag)
				return
			}
		}
		delete(f.snapshots, tag)
		w.WriteHeader(204)
	case path == "/v1/sandboxes" && r.Method == "POST":
		var req apitype.CreateSandboxRequest
		json.Unmarshal(body, &req)
		var chain string
		if req.SnapshotTag != "" {
			s := f.snapshots[req.SnapshotTag]
			if s == nil {
				fail(404, apitype.CodeNotFound, "no snapshot "+req.SnapshotTag)
				return
			}
			chain = s.chain
			if s.info.PoolReady > 0 {
				s.info.PoolReady--
			}
		}
		var out []apitype.SandboxInfo
		for range max(req.N, 1) {
			f.next++
			info := apitype.SandboxInfo{ID: fmt.Sprintf("sb-%d", f.next), Status: "running", SnapshotTag: req.SnapshotTag, Token: "tok"}
			f.sandboxes[info.ID] = &fakeSandbox{info: info, chain: chain}
			out = append(out, info)
		}
		if f.dropSpawns && req.SnapshotTag != "" {
			fail(504, apitype.CodeTimeout, "took too long")
			return
		}
		reply(201, out)
	case path == "/v1/sandboxes" && r.Method == "GET":
		out := []apitype.SandboxInfo{}
		for _, sb := range f.sandboxes {
			info := sb.info
			info.Token = ""
			out = append(out, info)
		}
		reply(200, out)
	case strings.HasPrefix(path, "/v1/sandboxes/"):
		id, op, _ := strings.Cut(strings.TrimPrefix(path, "/v1/sandboxes/"), "/")
		sb := f.sandboxes[id]
		if sb == nil {
			fail(404, apitype.CodeNotFound, "no sandbox "+id)
			return
		}
		switch op {
		case "":
			delete(f.sandboxes, id)
			w.WriteHeader(204)
		case "exec":
			var req apitype.ExecRequest
			json.Unmarshal(body, &req)
			var res apitype.ExecResponse
			if line, ok := strings.CutPrefix(req.Shell, "echo "); ok {
				sb.chain += strings.TrimSuffix(line, " >> /tmp/chain") + "\n"
			} else if slices.Equal(req.Args, []string{"cat", "/tmp/chain"}) {
				res.Stdout = sb.chain
			}
			reply(200, res)
		case "branch":
			var req apitype.BranchRequest
			json.Unmarshal(body, &req)
			si := apitype.SnapshotInfo{Tag: req.Tag, BranchedFrom: id, Parent: sb.info.SnapshotTag}
			if p := f.snapshots[sb.info.SnapshotTag]; p != nil {
				si.Depth = p.info.Depth + 1
			}
			f.snapshots[req.Tag] = &fakeSnapshot{info: si, chain: sb.chain}
			br := apitype.BranchResponse{SnapshotInfo: si, PauseMs: 42, StoppedMs: 7}
			for range req.N {
				f.next++
				info := apitype.SandboxInfo{ID: fmt.Sprintf("sb-%d", f.next), Status: "running", SnapshotTag: req.Tag, Token: "tok"}
				f.sandboxes[info.ID] = &fakeSandbox{info: info, chain: sb.chain}
				br.Children = append(br.Children, info)
			}
			reply(201, br)
		default:
			fail(404, apitype.CodeNotFound, "no route")
		}
	default:
		fail(404, apitype.CodeNotFound, "no route")
	}
}

func TestSnapshotBenches(t *testing.T) {
	fake := newSnapFake()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	var log strings.Builder
	b := &bencher{
		cl: client.New(srv.URL, "key"),
		o: benchOpts{spawns: 3, poolHandouts: 2, poolSize: 2, spawnN: 4, branches: 2,
			branchMiB: []int{0, 50}, chainDepth: 3, chainSamples: 2},
		log: &log,
	}
	var rows []benchResult
	b.runSnapshotBenches(context.Background(), apitype.Info{}, func(r benchResult) { rows = append(rows, r) })

	byName := make(map[string]benchResult)
	for _, r := range rows {
		byName[r.Name] = r
	}
	for _, name := range []string{"snapshot_build", "spawn", "pool_handout", "spawn_4", "branch_pause_0", "branch_pause_50",
		"chain_depth_0", "chain_depth_3", "chain_depth_3_vs_0"} {
		r, ok := byName[name]
		if !ok {
			t.Errorf("no row %s", name)
			continue
		}
		if r.Error != "" {
			t.Errorf("%s failed: %s", name, r.Error)
		}
	}
	if r := byName["spawn"]; r.N != 3 {
		t.Errorf("spawn N = %d, want 3", r.N)
	}
	if r := byName["branch_pause_50"]; r.P50 != 42 || r.N != 2 {
		t.Errorf("branch_pause_50 = %+v", r)
	}
	if r := byName["branch_stopped_50"]; r.P50 != 7 || r.N != 2 {
		t.Errorf("branch_stopped_50 = %+v", r)
	}
	// This test runs without the daemon's processes: Pss fails, saying so.
	if r := byName["pss_per_child"]; !strings.Contains(r.Error, "daemon's host") {
		t.Errorf("pss_per_child = %+v", r)
	}
	if len(fake.sandboxes) != 0 || len(fake.snapshots) != 0 {
		t.Errorf("left behind %d sandboxes, %d snapshots\n%s", len(fake.sandboxes), len(fake.snapshots), log.String())
	}
}

// TestBenchCleanup checks that cleanup finds sandboxes it was never told
// of, spawned from its snapshots, and deletes snapshots children first.
func TestBenchCleanup(t *testing.T) {
	fake := newSnapFake()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cl := client.New(srv.URL, "key")
	ctx := context.Background()
	cu := &benchCleanup{cl: cl, prefix: "bench-1", logf: t.Logf}

	mk := func(tag string) {
		cu.addSnapshot(tag)
		if _, err := cl.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag}); err != nil {
			t.Fatal(err)
		}
	}
	mk("bench-1")
	if _, err := cl.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "other"}); err != nil { // not ours
		t.Fatal(err)
	}
	sbs, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "bench-1"})
	if err != nil {
		t.Fatal(err)
	}
	cu.addSandboxes(sbs...)
	// A chain bench-1 -> bench-1-c1 -> bench-1-c2, made in order.
	parent := sbs[0].ID
	for _, tag := range []string{"bench-1-c1", "bench-1-c2"} {
		cu.addSnapshot(tag)
		if _, err := cl.Branch(ctx, parent, apitype.BranchRequest{Tag: tag}); err != nil {
			t.Fatal(err)
		}
		kids, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag})
		if err != nil {
			t.Fatal(err)
		}
		parent = kids[0].ID // not told to cleanup
	}
	// A spawn whose answer was lost.
	fake.dropSpawns = true
	if _, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "bench-1", N: 3}); err == nil {
		t.Fatal("dropped spawn succeeded")
	}
	// Someone else's sandbox, cold.
	fake.dropSpawns = false
	if _, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}

	cu.run(ctx)
	var left []string
	for tag := range fake.snapshots {
		left = append(left, tag)
	}
	if !slices.Equal(left, []string{"other"}) {
		t.Errorf("snapshots left: %v, want [other]", left)
	}
	if len(fake.sandboxes) != 1 {
		t.Errorf("%d sandboxes left, want 1 (not ours)", len(fake.sandboxes))
	}
	if fake.conflicts != 0 {
		t.Errorf("%d deletes refused: not deepest first", fake.conflicts)
	}
}
