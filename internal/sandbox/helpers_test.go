package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/store"
)

var testLimits = Limits{
	DefaultTTL:       10 * time.Minute,
	MaxTTL:           time.Hour,
	DefaultCPUs:      1,
	MaxCPUs:          4,
	DefaultMemoryMiB: 256,
	MaxMemoryMiB:     2048,
	MaxSandboxes:     20,
	DefaultDiskMiB:   1024,
	MaxDiskMiB:       4096,
	DefaultPids:      256,
	MaxPids:          1024,
	OpenFiles:        512,
}

// testEnv is a Service over the fake runtime and a real store.
type testEnv struct {
	svc *Service
	rt  *runtimetest.Fake
	st  *store.Store
	cfg Config
}

func newEnv(t *testing.T, opts ...func(*Config)) *testEnv {
	t.Helper()
	ctx := testCtx(t)
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := runtimetest.New(t)
	cfg := Config{
		Runtime:      rt,
		Store:        st,
		Images:       runtimetest.NewImages(map[string]string{"default": "default-0001", "other": "other-0002"}),
		DefaultImage: "default",
		Limits:       testLimits,
		Logger:       slog.New(slog.DiscardHandler),
		StartTimeout: 5 * time.Second,
		SnapshotDir:  filepath.Join(t.TempDir(), "snapshots"),
	}
	for _, o := range opts {
		o(&cfg)
	}
	e := &testEnv{rt: rt, st: st, cfg: cfg}
	e.start(t)
	t.Cleanup(func() { e.svc.Close() })
	return e
}

// start makes a new Service and recovers, as the daemon does at startup,
// and waits for the recovery's checks.
func (e *testEnv) start(t *testing.T) {
	t.Helper()
	e.begin(t)
	select {
	case <-e.svc.Recovered():
	case <-time.After(10 * time.Second):
		t.Fatal("recovery did not finish")
	}
}

// begin makes a new Service and starts its recovery.
func (e *testEnv) begin(t *testing.T) {
	t.Helper()
	e.svc = New(e.cfg)
	e.svc.warmLog = ".cove-warm.log" // in the fake sandbox's own directory
	if err := e.svc.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// restart stops the Service and starts a new one over the same store and
// runtime, as a daemon restart does.
func (e *testEnv) restart(t *testing.T) {
	t.Helper()
	e.svc.Close()
	e.start(t)
}

// rows returns the ids of the store's sandbox records, sorted.
func (e *testEnv) rows(t *testing.T) []string {
	t.Helper()
	recs, err := e.st.Sandboxes(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

func (e *testEnv) row(t *testing.T, id string) store.Sandbox {
	t.Helper()
	recs, err := e.st.Sandboxes(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no store record for %s", id)
	return store.Sandbox{}
}

// createOne creates one sandbox.
func (e *testEnv) createOne(t *testing.T, o CreateOptions) Info {
	t.Helper()
	infos, err := e.svc.Create(testCtx(t), o)
	if err != nil {
		t.Fatalf("Create(%+v): %v", o, err)
	}
	if len(infos) != 1 {
		t.Fatalf("Create(%+v) made %d sandboxes, want 1", o, len(infos))
	}
	return infos[0]
}

// open opens a sandbox for data-plane calls.
func (e *testEnv) open(t *testing.T, id, token string) *Sandbox {
	t.Helper()
	sb, err := e.svc.Open(context.Background(), id, token)
	if err != nil {
		t.Fatalf("Open(%s): %v", id, err)
	}
	return sb
}

// exec runs a shell command in a sandbox through the service.
func (e *testEnv) exec(t *testing.T, id, token, shell string) string {
	t.Helper()
	res, err := e.open(t, id, token).Exec(testCtx(t), ExecRequest{Shell: shell})
	if err != nil {
		t.Fatalf("Exec(%q) in %s: %v", shell, id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("Exec(%q) in %s exited %d: %s", shell, id, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

func (e *testEnv) build(t *testing.T, o BuildOptions) SnapshotInfo {
	t.Helper()
	if o.Warm == "" {
		o.Warm = "true"
	}
	info, err := e.svc.BuildSnapshot(testCtx(t), o)
	if err != nil {
		t.Fatalf("BuildSnapshot(%+v): %v", o, err)
	}
	return info
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

func ids(infos []Info) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.ID)
	}
	slices.Sort(out)
	return out
}
