package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/fakedaemon"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// startFake serves a fake daemon with the snapshot "default" on loopback.
func startFake(t *testing.T) (*fakedaemon.Daemon, string) {
	t.Helper()
	return startFakeWith(t, 0)
}

// startFakeWith is startFake whose creates not from a snapshot take
// slowCreate, as a cold boot does against a warm spawn.
func startFakeWith(t *testing.T, slowCreate time.Duration) (*fakedaemon.Daemon, string) {
	t.Helper()
	f := fakedaemon.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slowCreate > 0 && r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte("snapshot_tag")) {
				time.Sleep(slowCreate)
			}
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, "key")
	if _, err := cl.CreateSnapshot(context.Background(), apitype.CreateSnapshotRequest{Tag: "default"}); err != nil {
		t.Fatal(err)
	}
	return f, srv.URL
}

func TestRunBoundedByOps(t *testing.T) {
	f, url := startFake(t)
	o := Defaults()
	o.Clients, o.Ops, o.Duration, o.JSON, o.DaemonPID = 4, 300, 0, true, os.Getpid()
	var out, log bytes.Buffer
	rep, err := Run(context.Background(), url, "key", o, &out, &log)
	if err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out.String(), log.String())
	}
	if rep.TotalOps != 300 || rep.Errors != 0 {
		t.Errorf("ran %d ops with %d errors, want 300 and 0", rep.TotalOps, rep.Errors)
	}
	seen := map[string]bool{}
	for _, s := range rep.Ops {
		seen[s.Op] = s.N > 0
		if s.P50Ms > s.P90Ms || s.P90Ms > s.P99Ms || s.P99Ms > s.MaxMs {
			t.Errorf("%s: percentiles out of order: %+v", s.Op, s)
		}
	}
	for _, op := range Ops() {
		if !seen[op] {
			t.Errorf("op %s never ran: %+v", op, rep.Ops)
		}
	}
	if left := f.Sandboxes(); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
	if left := f.Snapshots(); len(left) != 1 {
		t.Errorf("snapshots left %v, want only default", left)
	}
	if rep.Daemon.Before == nil || rep.Daemon.After == nil || rep.Daemon.After.FDs == 0 {
		t.Errorf("daemon figures of this process missing: %+v", rep.Daemon)
	}
	var back Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.TotalOps != 300 {
		t.Errorf("--json output does not decode to the report (%v): %s", err, out.String())
	}
}

func TestRunCoversTheMix(t *testing.T) {
	for _, tc := range []struct {
		name             string
		mix              Mix
		clients, maxLive int
		slowCreate       time.Duration
	}{
		{"default", DefaultMix(), 0, 0, 0},
		{"rare branch", Mix{OpCreate: 1, OpSpawn: 100, OpExec: 100, OpFiles: 100, OpBranch: 1, OpKill: 1}, 0, 0, 0},
		{"no create", Mix{OpSpawn: 1, OpExec: 1, OpBranch: 1, OpKill: 1}, 0, 0, 0},
		// Others hold the places the scripted branch needs: it waits in
		// the script rather than turning into a kill.
		{"crowded", Mix{OpCreate: 1, OpSpawn: 100, OpExec: 1, OpFiles: 1, OpBranch: 1, OpKill: 1}, 4, 4, 0},
		// Fewer places than clients, and a slow first create: the others
		// fill the places meanwhile and must not keep taking each one
		// freed while the scripted op waits for it.
		{"starved", Mix{OpCreate: 1, OpSpawn: 100, OpExec: 1, OpFiles: 1, OpBranch: 1, OpKill: 1}, 4, 3, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := startFakeWith(t, tc.slowCreate)
			o := Defaults()
			o.Clients, o.Ops, o.Duration, o.Mix = 1, len(coverScript(tc.mix)), 0, tc.mix
			if tc.clients > 0 {
				o.Clients, o.Ops, o.MaxSandboxes = tc.clients, 4*tc.clients*len(coverScript(tc.mix)), tc.maxLive
			}
			rep, err := Run(context.Background(), url, "key", o, &bytes.Buffer{}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			ran := map[string]bool{}
			for _, s := range rep.Ops {
				ran[s.Op] = true
			}
			for op, w := range tc.mix {
				if w > 0 && !ran[op] {
					t.Errorf("%s did not run in the first %d ops: %+v", op, o.Ops, rep.Ops)
				}
			}
		})
	}
}

func TestRunBoundedByTime(t *testing.T) {
	f, url := startFake(t)
	o := Defaults()
	o.Clients, o.Duration, o.MaxSandboxes = 3, 200*time.Millisecond, 2
	var out, log bytes.Buffer
	rep, err := Run(context.Background(), url, "key", o, &out, &log)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if rep.TotalOps == 0 {
		t.Fatal("no ops ran")
	}
	for _, want := range []string{"ops/s", "p99 ms", "exec", "daemon"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if left := f.Sandboxes(); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

func TestRunCountsErrorsByCode(t *testing.T) {
	f, url := startFake(t)
	f.SetDropSpawns(true) // every spawn answers 504 timeout, leaving its sandbox
	o := Defaults()
	o.Clients, o.Ops, o.Duration, o.Mix = 2, 20, 0, Mix{OpSpawn: 1, OpExec: 1}
	var out, log bytes.Buffer
	rep, err := Run(context.Background(), url, "key", o, &out, &log)
	if err == nil || !strings.Contains(err.Error(), "ops failed") {
		t.Fatalf("Run = %v, want an error naming the failed ops", err)
	}
	if len(rep.ErrorsByCode) == 0 || rep.ErrorsByCode[0].Code != apitype.CodeTimeout || rep.ErrorsByCode[0].Op != OpSpawn {
		t.Errorf("errors by code %+v, want spawn timeouts first", rep.ErrorsByCode)
	}
	// The fake made those sandboxes without saying so: the run finds
	// them by label, deletes and reports them.
	if len(rep.SweptSandboxes) == 0 || len(rep.LeftSandboxes) != 0 || len(f.Sandboxes()) != 0 {
		t.Errorf("swept %v, left %v, the fake holds %v: want some swept, none left", rep.SweptSandboxes, rep.LeftSandboxes, f.Sandboxes())
	}
}

func TestRunInterruptedCleansUp(t *testing.T) {
	f, url := startFake(t)
	o := Defaults()
	o.Clients, o.Duration = 4, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	var out, log bytes.Buffer
	rep, err := Run(ctx, url, "key", o, &out, &log)
	if err == nil || !rep.Interrupted {
		t.Errorf("Run = %v, interrupted %v: want an interrupted run's error", err, rep.Interrupted)
	}
	if left := f.Sandboxes(); len(left) != 0 {
		t.Errorf("sandboxes left after ^C: %v", left)
	}
	if left := f.Snapshots(); len(left) != 1 {
		t.Errorf("snapshots left after ^C %v, want only default", left)
	}
}

func TestRunRefusesBeforeCalling(t *testing.T) {
	_, url := startFake(t)
	bad := Defaults()
	bad.Clients = 0
	noSnap := Defaults()
	noSnap.Snapshot = "nope"
	for _, tc := range []struct {
		name, url string
		o         Options
		want      string
	}{
		{"remote", "http://10.1.2.3:8080", Defaults(), "loopback"},
		{"bad options", url, bad, "clients"},
		{"no snapshot", url, noSnap, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.url, "key", tc.o, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://127.5.6.7", true},
		{"http://[::1]:9000", true},
		{"http://localhost:8080", true},
		{"https://LOCALHOST", true},
		{"http://10.0.0.1:8080", false},
		{"http://0.0.0.0:8080", false},
		{"http://example.com", false},
		{"http://127.0.0.1.example.com", false},
		{"unix:///run/cove.sock", false},
		{"http://%zz", false},
	} {
		if err := CheckLoopback(tc.url); (err == nil) != tc.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok %v", tc.url, err, tc.ok)
		}
	}
}

func TestMixSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // String() after, or "" for an error
	}{
		{"exec=5,kill=2", "exec=5,kill=2"},
		{" spawn=1 , files=0", "spawn=1,files=0"},
		{"exec", ""},
		{"eval=1", ""},
		{"exec=-1", ""},
		{"exec=x", ""},
	} {
		m := DefaultMix()
		before := m.String()
		err := m.Set(tc.in)
		switch {
		case tc.want == "" && (err == nil || m.String() != before):
			t.Errorf("Set(%q) = %v, mix %s: want an error and the mix unchanged", tc.in, err, m)
		case tc.want != "" && (err != nil || m.String() != tc.want):
			t.Errorf("Set(%q) = %v, mix %s, want %s", tc.in, err, m, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"defaults", func(*Options) {}, ""},
		{"no bound", func(o *Options) { o.Duration = 0 }, "bound"},
		{"ops only", func(o *Options) { o.Duration, o.Ops = 0, 10 }, ""},
		{"no maker", func(o *Options) { o.Mix = Mix{OpExec: 1} }, "create or spawn"},
		{"all zero", func(o *Options) { o.Mix = Mix{OpExec: 0} }, "every op 0"},
		{"spawn without snapshot", func(o *Options) { o.Snapshot = "" }, "snapshot"},
		{"create without snapshot", func(o *Options) { o.Snapshot, o.Mix = "", Mix{OpCreate: 1, OpExec: 1} }, ""},
		{"huge file", func(o *Options) { o.FileBytes = 1 << 30 }, "file size"},
		{"per client", func(o *Options) { o.PerClient = 0 }, "per client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Defaults()
			tc.edit(&o)
			err := o.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    int
		want time.Duration
	}{
		{nil, 50, 0},
		{lat[:1], 99, time.Millisecond},
		{lat, 50, 50 * time.Millisecond},
		{lat, 99, 99 * time.Millisecond},
		{lat[:10], 90, 9 * time.Millisecond},
		{lat[:10], 99, 10 * time.Millisecond},
	} {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(%d values, %d) = %s, want %s", len(tc.in), tc.p, got, tc.want)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.Error{Status: 429, Code: apitype.CodeLimit}, apitype.CodeLimit},
		{&client.Error{Status: 502}, "http_502"},
		{mismatchError{"x"}, "mismatch"},
		{context.DeadlineExceeded, "client_timeout"},
		{errors.New("connection reset"), "transport"},
	} {
		if got := errorCode(tc.err); got != tc.want {
			t.Errorf("errorCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestVmRSS(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"Name:\tcove\nVmRSS:\t   2048 kB\n", 2 << 20, true},
		{"Name:\tcove\n", 0, false},
		{"VmRSS:\t2048 MB\n", 0, false},
	} {
		got, err := vmRSS([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("vmRSS(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0
   1: 0100007F:1F90 0100007F:D000 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0
`
	got := listeningInodes([]byte(table), 8080)
	if len(got) != 1 || got[0] != "1111" {
		t.Errorf("listeningInodes = %v, want [1111]", got)
	}
}

func TestFindListenerFindsThisProcess(t *testing.T) {
	srv := httptest.NewServer(fakedaemon.New())
	defer srv.Close()
	p, err := port(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := findListener("/proc", p)
	if err != nil || pid != os.Getpid() {
		t.Errorf("findListener = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
}
