package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/runtime"
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

// start makes a new Service and recovers, as the daemon does at startup.
func (e *testEnv) start(t *testing.T) {
	t.Helper()
	e.svc = New(e.cfg)
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

// exec runs a shell command in a sandbox through the service.
func (e *testEnv) exec(t *testing.T, id, token, shell string) string {
	t.Helper()
	sb, err := e.svc.Open(id, token)
	if err != nil {
		t.Fatalf("Open(%s): %v", id, err)
	}
	res, err := sb.Exec(testCtx(t), agentproto.ExecRequest{Shell: shell})
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

func TestCreate(t *testing.T) {
	tests := []struct {
		name                 string
		opts                 CreateOptions
		wantN                int
		wantImage, wantRoot  string
		wantCPUs, wantMemory int
		wantTTL              time.Duration
	}{
		{name: "defaults", opts: CreateOptions{},
			wantN: 1, wantImage: "default-0001", wantRoot: "fake-rootfs/default-0001",
			wantCPUs: 1, wantMemory: 256, wantTTL: testLimits.DefaultTTL},
		{name: "n 0 means 1", opts: CreateOptions{N: 0, TTL: time.Minute},
			wantN: 1, wantImage: "default-0001", wantRoot: "fake-rootfs/default-0001",
			wantCPUs: 1, wantMemory: 256, wantTTL: time.Minute},
		{name: "explicit", opts: CreateOptions{Image: "other", N: 3, TTL: time.Hour, CPUs: 4, MemoryMiB: 64},
			wantN: 3, wantImage: "other-0002", wantRoot: "fake-rootfs/other-0002",
			wantCPUs: 4, wantMemory: 64, wantTTL: time.Hour},
		{name: "by image id", opts: CreateOptions{Image: "other-0002", MemoryMiB: 2048},
			wantN: 1, wantImage: "other-0002", wantRoot: "fake-rootfs/other-0002",
			wantCPUs: 1, wantMemory: 2048, wantTTL: testLimits.DefaultTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			infos, err := e.svc.Create(testCtx(t), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != tc.wantN {
				t.Fatalf("made %d sandboxes, want %d", len(infos), tc.wantN)
			}
			tokens := map[string]bool{}
			for _, info := range infos {
				if info.Status != StatusRunning || info.Backend != "fake" || info.Image != tc.wantImage ||
					info.CPUs != tc.wantCPUs || info.MemoryMiB != tc.wantMemory || info.SnapshotTag != "" {
					t.Errorf("info = %+v", info)
				}
				if got := info.ExpiresAt.Sub(info.CreatedAt); got != tc.wantTTL {
					t.Errorf("lifetime = %s, want %s", got, tc.wantTTL)
				}
				if len(info.Token) != 48 || tokens[info.Token] {
					t.Errorf("token %q is not a fresh 24-byte hex token", info.Token)
				}
				tokens[info.Token] = true

				spec := e.rt.Spec(info.ID)
				if spec.Rootfs != tc.wantRoot || spec.CPUs != tc.wantCPUs || spec.MemoryMiB != tc.wantMemory || spec.Hostname != info.ID {
					t.Errorf("runtime spec = %+v", spec)
				}
				rec := e.row(t, info.ID)
				if rec.Status != StatusRunning || rec.TokenHash != hashToken(info.Token) {
					t.Errorf("store record = %+v; want running with the token's hash", rec)
				}
				if strings.Contains(rec.TokenHash, info.Token) {
					t.Error("the store holds the token itself")
				}
				if got, err := e.svc.Get(info.ID); err != nil || got.Token != "" || got.ID != info.ID {
					t.Errorf("Get = %+v, %v; want the sandbox without its token", got, err)
				}
			}
			if got, want := ids(e.svc.List()), ids(infos); !slices.Equal(got, want) {
				t.Errorf("List = %v, want %v", got, want)
			}
			if got := e.svc.Stats().Created.Load(); got != int64(tc.wantN) {
				t.Errorf("Stats().Created = %d, want %d", got, tc.wantN)
			}
		})
	}
}

func TestCreateInvalid(t *testing.T) {
	tests := []struct {
		name string
		opts CreateOptions
		want error
	}{
		{"n negative", CreateOptions{N: -1}, ErrInvalid},
		{"n over max", CreateOptions{N: MaxN + 1}, ErrInvalid},
		{"ttl negative", CreateOptions{TTL: -time.Second}, ErrInvalid},
		{"ttl over max", CreateOptions{TTL: testLimits.MaxTTL + time.Second}, ErrInvalid},
		{"cpus negative", CreateOptions{CPUs: -1}, ErrInvalid},
		{"cpus over max", CreateOptions{CPUs: testLimits.MaxCPUs + 1}, ErrInvalid},
		{"memory under min", CreateOptions{MemoryMiB: MinMemoryMiB - 1}, ErrInvalid},
		{"memory negative", CreateOptions{MemoryMiB: -1}, ErrInvalid},
		{"memory over max", CreateOptions{MemoryMiB: testLimits.MaxMemoryMiB + 1}, ErrInvalid},
		{"unknown image", CreateOptions{Image: "nope"}, ErrNotFound},
		{"unknown snapshot", CreateOptions{SnapshotTag: "nope"}, ErrNotFound},
		{"over the sandbox limit", CreateOptions{N: testLimits.MaxSandboxes + 1}, ErrLimit},
	}
	e := newEnv(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			infos, err := e.svc.Create(testCtx(t), tc.opts)
			wantErr(t, err, tc.want)
			if infos != nil {
				t.Errorf("Create returned %v with its error", infos)
			}
			if e.rt.Starts() != 0 || len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 || e.svc.Count() != 0 {
				t.Errorf("a refused create left something: %d starts, runtime %v, store %v, %d live",
					e.rt.Starts(), e.rt.IDs(), e.rows(t), e.svc.Count())
			}
		})
	}
}

// A guest that dies while it boots is booted once more; one that dies
// twice fails the call at once, not after the start timeout.
func TestCreateBootsDeadGuestAgain(t *testing.T) {
	tests := []struct {
		name       string
		deaths     int
		wantStarts int
		wantErr    error
	}{
		{name: "dies once", deaths: 1, wantStarts: 2},
		{name: "dies twice", deaths: 2, wantStarts: 2, wantErr: ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.StartTimeout = time.Minute })
			for i := 1; i <= tc.deaths; i++ {
				e.rt.DieNthStart(i)
			}
			t0 := time.Now()
			infos, err := e.svc.Create(testCtx(t), CreateOptions{N: 1})
			if d := time.Since(t0); d > 30*time.Second {
				t.Errorf("Create took %v: it waited for a dead guest", d)
			}
			if n := e.rt.Starts(); n != tc.wantStarts {
				t.Errorf("%d starts, want %d", n, tc.wantStarts)
			}
			if tc.wantErr != nil {
				wantErr(t, err, tc.wantErr)
				if !errors.Is(err, runtime.ErrExited) {
					t.Errorf("error %v does not say the guest exited", err)
				}
				if got := e.rt.IDs(); len(got) != 0 {
					t.Errorf("runtime still holds %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := e.rt.IDs(); len(got) != 1 || got[0] != infos[0].ID {
				t.Errorf("runtime holds %v, want just %s", got, infos[0].ID)
			}
		})
	}
}

// TestCreateAllOrNothing: when one sandbox of a batch fails to start, the
// others are destroyed and the call fails.
func TestCreateAllOrNothing(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		failAt int  // 1-based Start call
		deaf   bool // the sandbox starts but its agent never answers
		want   error
	}{
		{name: "first start fails", failAt: 1, want: boom},
		{name: "second start fails", failAt: 2, want: boom},
		{name: "third start fails", failAt: 3, want: boom},
		{name: "second agent never answers", failAt: 2, deaf: true, want: ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.StartTimeout = 200 * time.Millisecond })
			if tc.deaf {
				e.rt.DeafNthStart(tc.failAt)
			} else {
				e.rt.FailNthStart(tc.failAt, boom)
			}
			infos, err := e.svc.Create(testCtx(t), CreateOptions{N: 3})
			wantErr(t, err, tc.want)
			if infos != nil {
				t.Errorf("Create returned %v with its error", infos)
			}
			if n := e.rt.Starts(); n != 3 {
				t.Errorf("%d starts, want 3", n)
			}
			if got := e.rt.IDs(); len(got) != 0 {
				t.Errorf("runtime still holds %v", got)
			}
			if got := e.rows(t); len(got) != 0 {
				t.Errorf("store still holds %v", got)
			}
			if n := e.svc.Count(); n != 0 {
				t.Errorf("%d sandboxes live", n)
			}
			if n := e.svc.Stats().Failures.Load(); n != 1 {
				t.Errorf("Stats().Failures = %d, want 1", n)
			}
			// The reservation is released: the full limit is usable again.
			if _, err := e.svc.Create(testCtx(t), CreateOptions{N: testLimits.MaxSandboxes}); err != nil {
				t.Errorf("create after a failed create: %v", err)
			}
		})
	}
}

func TestCreateLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxSandboxes = 2 })
	ctx := testCtx(t)
	_, err := e.svc.Create(ctx, CreateOptions{N: 3})
	wantErr(t, err, ErrLimit)
	if n := e.rt.Starts(); n != 0 {
		t.Fatalf("%d starts after a refused create", n)
	}
	infos, err := e.svc.Create(ctx, CreateOptions{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Create(ctx, CreateOptions{})
	wantErr(t, err, ErrLimit)
	if err := e.svc.Delete(ctx, infos[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, CreateOptions{}); err != nil {
		t.Fatalf("create after freeing a slot: %v", err)
	}
}

// TestCreateLimitCountsStarting: sandboxes still starting count against
// the limit.
func TestCreateLimitCountsStarting(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxSandboxes = 3 })
	release := e.rt.HoldStarts()
	t.Cleanup(release)
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Create(context.Background(), CreateOptions{N: 2})
		done <- err
	}()
	waitFor(t, "both starts to begin", func() bool { return e.rt.Starts() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // held too if admitted
	defer cancel()
	_, err := e.svc.Create(ctx, CreateOptions{N: 2})
	wantErr(t, err, ErrLimit)
	release()
	if err := <-done; err != nil {
		t.Fatalf("held create: %v", err)
	}
	if _, err := e.svc.Create(testCtx(t), CreateOptions{}); err != nil {
		t.Errorf("create within the limit: %v", err)
	}
}

func TestOpen(t *testing.T) {
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{})
	other := e.createOne(t, CreateOptions{})
	tests := []struct {
		name, id, token string
		want            error
	}{
		{"right token", info.ID, info.Token, nil},
		{"missing token", info.ID, "", ErrForbidden},
		{"wrong token", info.ID, strings.Repeat("0", 48), ErrForbidden},
		{"another sandbox's token", info.ID, other.Token, ErrForbidden},
		{"token's prefix", info.ID, info.Token[:10], ErrForbidden},
		{"unknown id", "sb-000000000000", info.Token, ErrNotFound},
		{"empty id", "", info.Token, ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := e.svc.Open(tc.id, tc.token)
			if tc.want == nil {
				if err != nil || sb.ID() != tc.id {
					t.Fatalf("Open = %v, %v", sb, err)
				}
				return
			}
			wantErr(t, err, tc.want)
			if sb != nil {
				t.Error("Open returned a handle with its error")
			}
		})
	}
}

func TestDataPlane(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb, err := e.svc.Open(info.ID, info.Token)
	if err != nil {
		t.Fatal(err)
	}

	// Exec reaches this sandbox's agent: it runs in the sandbox's work dir.
	if got, want := e.exec(t, info.ID, info.Token, "echo hello; pwd"), "hello\n"+e.rt.WorkDir(info.ID)+"\n"; got != want {
		t.Errorf("exec output = %q, want %q", got, want)
	}
	res, err := sb.Exec(ctx, agentproto.ExecRequest{Args: []string{"sh", "-c", "echo oops >&2; exit 3"}})
	if err != nil || res.ExitCode != 3 || res.Stderr != "oops\n" {
		t.Errorf("failing exec = %+v, %v", res, err)
	}
	if n := e.svc.Stats().Execs.Load(); n != 2 {
		t.Errorf("Stats().Execs = %d, want 2", n)
	}
	if p, _, err := sb.Ping(ctx); err != nil || p.Hostname != info.ID {
		t.Errorf("Ping = %+v, %v", p, err)
	}

	// Files.
	fi, err := sb.Put(ctx, agentproto.PutRequest{Path: "dir/a.txt", Mode: 0o600}, strings.NewReader("content"))
	if err != nil || fi.Size != 7 || fi.Mode != 0o600 {
		t.Fatalf("Put = %+v, %v", fi, err)
	}
	if got := e.exec(t, info.ID, info.Token, "cat dir/a.txt"); got != "content" {
		t.Errorf("cat = %q", got)
	}
	_, rc, err := sb.Get(ctx, agentproto.GetRequest{Path: "dir/a.txt"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "content" {
		t.Errorf("Get = %q, %v", b, err)
	}
	ls, err := sb.List(ctx, agentproto.ListRequest{Path: "dir"})
	if err != nil || len(ls.Entries) != 1 {
		t.Errorf("List = %+v, %v", ls, err)
	}
	w, err := sb.Wait(ctx, agentproto.WaitRequest{Path: "dir/a.txt", Text: "tent", TimeoutMs: 1000})
	if err != nil || !w.Found {
		t.Errorf("Wait = %+v, %v", w, err)
	}

	// Refused before reaching the agent, or mapped from its answer.
	errTests := []struct {
		name string
		call func() error
		want error
	}{
		{"exec without a command", func() error { _, err := sb.Exec(ctx, agentproto.ExecRequest{}); return err }, ErrInvalid},
		{"exec args and shell", func() error {
			_, err := sb.Exec(ctx, agentproto.ExecRequest{Args: []string{"true"}, Shell: "true"})
			return err
		}, ErrInvalid},
		{"exec negative timeout", func() error {
			_, err := sb.Exec(ctx, agentproto.ExecRequest{Shell: "true", TimeoutMs: -1})
			return err
		}, ErrInvalid},
		{"eval empty", func() error { _, err := sb.Eval(ctx, agentproto.EvalRequest{}); return err }, ErrInvalid},
		{"put dotdot", func() error {
			_, err := sb.Put(ctx, agentproto.PutRequest{Path: "../x"}, strings.NewReader(""))
			return err
		}, ErrInvalid},
		{"put bad mode", func() error {
			_, err := sb.Put(ctx, agentproto.PutRequest{Path: "x", Mode: 0o10000}, strings.NewReader(""))
			return err
		}, ErrInvalid},
		{"put onto a directory", func() error {
			_, err := sb.Put(ctx, agentproto.PutRequest{Path: "dir"}, strings.NewReader(""))
			return err
		}, ErrInvalid},
		{"get dotdot", func() error { _, _, err := sb.Get(ctx, agentproto.GetRequest{Path: "a/../b"}); return err }, ErrInvalid},
		{"get missing", func() error { _, _, err := sb.Get(ctx, agentproto.GetRequest{Path: "missing"}); return err }, ErrNotFound},
		{"get negative offset", func() error {
			_, _, err := sb.Get(ctx, agentproto.GetRequest{Path: "dir/a.txt", Offset: -1})
			return err
		}, ErrInvalid},
		{"list deep", func() error { _, err := sb.List(ctx, agentproto.ListRequest{Path: ".", Depth: 65}); return err }, ErrInvalid},
		{"wait no text", func() error { _, err := sb.Wait(ctx, agentproto.WaitRequest{Path: "x"}); return err }, ErrInvalid},
		{"wait negative timeout", func() error {
			_, err := sb.Wait(ctx, agentproto.WaitRequest{Path: "x", Text: "y", TimeoutMs: -1})
			return err
		}, ErrInvalid},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.call(), tc.want) })
	}

	// A broken agent connection is replaced on the next call.
	e.svc.mu.Lock()
	old := e.svc.boxes[info.ID].agent
	e.svc.mu.Unlock()
	e.rt.DropConns(info.ID)
	<-old.Closed()
	if got := e.exec(t, info.ID, info.Token, "echo again"); got != "again\n" {
		t.Errorf("exec after a dropped connection = %q", got)
	}

	// A handle outlives its sandbox only as an error.
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Exec(ctx, agentproto.ExecRequest{Shell: "true"})
	wantErr(t, err, ErrNotFound)
}

func TestExtend(t *testing.T) {
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{TTL: time.Minute})
	tests := []struct {
		name string
		id   string
		ttl  time.Duration
		want error
	}{
		{"zero", info.ID, 0, ErrInvalid},
		{"negative", info.ID, -time.Second, ErrInvalid},
		{"over max", info.ID, testLimits.MaxTTL + time.Second, ErrInvalid},
		{"unknown id", "sb-000000000000", time.Minute, ErrNotFound},
		{"longer", info.ID, 30 * time.Minute, nil},
		{"max", info.ID, testLimits.MaxTTL, nil},
		{"shorter", info.ID, 2 * time.Second, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := e.svc.Get(info.ID)
			t0 := time.Now()
			got, err := e.svc.Extend(testCtx(t), tc.id, tc.ttl)
			if tc.want != nil {
				wantErr(t, err, tc.want)
				if after, _ := e.svc.Get(info.ID); !after.ExpiresAt.Equal(before.ExpiresAt) {
					t.Errorf("a refused extend moved the expiry from %v to %v", before.ExpiresAt, after.ExpiresAt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ExpiresAt.Before(t0.Add(tc.ttl)) || got.ExpiresAt.After(time.Now().Add(tc.ttl)) {
				t.Errorf("expires at %v, want %s from now", got.ExpiresAt, tc.ttl)
			}
			if g, _ := e.svc.Get(info.ID); !g.ExpiresAt.Equal(got.ExpiresAt) {
				t.Errorf("Get says expiry %v, Extend said %v", g.ExpiresAt, got.ExpiresAt)
			}
			if rec := e.row(t, info.ID); rec.ExpiresAt.UnixMilli() != got.ExpiresAt.UnixMilli() {
				t.Errorf("store expiry %v, want %v", rec.ExpiresAt, got.ExpiresAt)
			}
		})
	}
}

func TestReaperDestroysExpired(t *testing.T) {
	e := newEnv(t)
	short := e.createOne(t, CreateOptions{TTL: 300 * time.Millisecond})
	long := e.createOne(t, CreateOptions{})
	if _, err := e.svc.Open(short.ID, short.Token); err != nil {
		t.Fatalf("open before expiry: %v", err)
	}
	waitFor(t, "the expired sandbox to be reaped", func() bool {
		return !slices.Contains(e.rt.IDs(), short.ID) && !slices.Contains(e.rows(t), short.ID)
	})
	_, err := e.svc.Open(short.ID, short.Token)
	wantErr(t, err, ErrNotFound)
	if got := ids(e.svc.List()); !slices.Equal(got, []string{long.ID}) {
		t.Errorf("List = %v, want only %s", got, long.ID)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{long.ID}) {
		t.Errorf("runtime holds %v, want only %s", got, long.ID)
	}
	if n := e.svc.Stats().Expired.Load(); n != 1 {
		t.Errorf("Stats().Expired = %d, want 1", n)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	keep := e.createOne(t, CreateOptions{})
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{keep.ID}) {
		t.Errorf("runtime holds %v, want [%s]", got, keep.ID)
	}
	if got := e.rows(t); !slices.Equal(got, []string{keep.ID}) {
		t.Errorf("store holds %v, want [%s]", got, keep.ID)
	}
	wantErr(t, e.svc.Delete(ctx, info.ID), ErrNotFound)
	_, err := e.svc.Get(info.ID)
	wantErr(t, err, ErrNotFound)
	_, err = e.svc.Open(info.ID, info.Token)
	wantErr(t, err, ErrNotFound)
	wantErr(t, e.svc.Delete(ctx, "sb-000000000000"), ErrNotFound)
	if n := e.svc.Stats().Destroyed.Load(); n != 1 {
		t.Errorf("Stats().Destroyed = %d, want 1", n)
	}
}

func TestRecover(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	alive := e.createOne(t, CreateOptions{})
	lost := e.createOne(t, CreateOptions{}) // running, but its agent stops answering
	e.rt.SetDeaf(lost.ID)

	now := time.Now()
	put := func(id, status, backend string, expires time.Time, boot bool) {
		t.Helper()
		rec := store.Sandbox{ID: id, Status: status, Backend: backend, Image: "default-0001", CPUs: 1,
			MemoryMiB: 256, TokenHash: hashToken("t-" + id), CreatedAt: now, ExpiresAt: expires}
		if err := e.st.PutSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if boot {
			e.rt.Boot(t, id)
		}
	}
	put("sb-creating0000", StatusCreating, "fake", now.Add(time.Hour), true)
	put("sb-stopping0000", StatusStopping, "fake", now.Add(time.Hour), true)
	put("sb-pooled000000", StatusPooled, "fake", now.Add(time.Hour), true)
	put("sb-expired00000", StatusRunning, "fake", now.Add(-time.Second), true)
	put("sb-otherbackend", StatusRunning, "qemu", now.Add(time.Hour), false)
	put("sb-gone00000000", StatusRunning, "fake", now.Add(time.Hour), false) // runtime holds nothing
	e.rt.Boot(t, "sb-orphan000000")                                          // runtime only

	e.restart(t)

	if got := ids(e.svc.List()); !slices.Equal(got, []string{alive.ID}) {
		t.Errorf("List after recover = %v, want [%s]", got, alive.ID)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{alive.ID}) {
		t.Errorf("runtime holds %v, want [%s]", got, alive.ID)
	}
	if got := e.rows(t); !slices.Equal(got, []string{alive.ID}) {
		t.Errorf("store holds %v, want [%s]", got, alive.ID)
	}
	for _, id := range []string{"sb-creating0000", "sb-stopping0000", "sb-pooled000000", "sb-expired00000", "sb-orphan000000", lost.ID} {
		if !e.rt.Destroyed(id) {
			t.Errorf("%s was not destroyed", id)
		}
	}
	// The re-attached sandbox keeps its token and answers.
	if got := e.exec(t, alive.ID, alive.Token, "echo back"); got != "back\n" {
		t.Errorf("exec after recover = %q", got)
	}
	_, err := e.svc.Open(alive.ID, lost.Token)
	wantErr(t, err, ErrForbidden)
	_, err = e.svc.Open(lost.ID, lost.Token)
	wantErr(t, err, ErrNotFound)
}

func TestClose(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 1024 })
	e.build(t, BuildOptions{Tag: "base", PoolSize: 2})
	waitFor(t, "the pool to fill", func() bool { s, _ := e.svc.Snapshot("base"); return s.PoolReady == 2 })
	info := e.createOne(t, CreateOptions{})
	waitFor(t, "the pool to refill", func() bool { return len(e.rt.IDs()) == 3 })

	e.svc.Close()
	// Sandboxes in use keep running for the next daemon; pooled ones go.
	if got := e.rt.IDs(); !slices.Equal(got, []string{info.ID}) {
		t.Errorf("after Close the runtime holds %v, want [%s]", got, info.ID)
	}
	if got := e.rows(t); !slices.Equal(got, []string{info.ID}) {
		t.Errorf("after Close the store holds %v, want [%s]", got, info.ID)
	}
	e.start(t)
	if got := e.exec(t, info.ID, info.Token, "echo still"); got != "still\n" {
		t.Errorf("exec after restart = %q", got)
	}
}

func TestBuildSnapshot(t *testing.T) {
	e := newEnv(t)
	sn, err := e.svc.BuildSnapshot(testCtx(t), BuildOptions{Tag: "base-1.0_x", Image: "other", Warm: "echo warm > w.txt",
		CPUs: 2, MemoryMiB: 512, PoolSize: 0})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Snapshot{Tag: "base-1.0_x", Backend: "fake", Image: "other-0002", CPUs: 2, MemoryMiB: 512,
		SizeBytes: sn.SizeBytes, CreatedAt: sn.CreatedAt, RuntimeVersion: "fake 1"}
	if sn.Snapshot != want || sn.SizeBytes == 0 || sn.PoolReady != 0 || sn.Children != 0 {
		t.Errorf("snapshot = %+v, want %+v", sn, want)
	}
	cps := e.rt.Checkpoints()
	if len(cps) != 1 {
		t.Fatalf("checkpoints = %+v", cps)
	}
	if cp := cps[0]; cp.LeaveRunning || e.rt.Warms(cp.ID) != 1 {
		t.Errorf("build checkpoint %+v, warmed %d times; want a stopping checkpoint of a warmed sandbox", cp, e.rt.Warms(cp.ID))
	}
	// The builder is started as one; a sandbox spawned from it (below) is
	// not.
	if !e.rt.Spec(cps[0].ID).Golden {
		t.Error("the builder's spec is not Golden")
	}
	dir := filepath.Join(e.cfg.SnapshotDir, "base-1.0_x")
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		t.Errorf("snapshot directory: %v", err)
	}
	// The builder sandbox is gone and was never a live sandbox.
	if len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 || e.svc.Count() != 0 {
		t.Errorf("build left runtime %v, store %v, %d live", e.rt.IDs(), e.rows(t), e.svc.Count())
	}
	recs, err := e.st.Snapshots(testCtx(t))
	if err != nil || len(recs) != 1 || recs[0].Tag != "base-1.0_x" {
		t.Errorf("store snapshots = %+v, %v", recs, err)
	}
	if got := e.svc.Snapshots(); len(got) != 1 || got[0].Tag != "base-1.0_x" {
		t.Errorf("Snapshots = %+v", got)
	}
	child := e.createOne(t, CreateOptions{SnapshotTag: "base-1.0_x"})
	if e.rt.Spec(child.ID).Golden {
		t.Error("a spawned sandbox's spec is Golden")
	}
	// The pool size defaults to the configured one.
	e = newEnv(t, func(c *Config) { c.DefaultPoolSize = 3 })
	if sn := e.build(t, BuildOptions{Tag: "dflt", PoolSize: -1}); sn.PoolSize != 3 {
		t.Errorf("default pool size = %d, want 3", sn.PoolSize)
	}
}

func TestBuildSnapshotErrors(t *testing.T) {
	e := newEnv(t)
	e.build(t, BuildOptions{Tag: "dup"})
	tests := []struct {
		name string
		opts BuildOptions
		want error
	}{
		{"empty tag", BuildOptions{Tag: ""}, ErrInvalid},
		{"tag with slash", BuildOptions{Tag: "a/b"}, ErrInvalid},
		{"tag dotdot", BuildOptions{Tag: ".."}, ErrInvalid},
		{"tag starting with a dash", BuildOptions{Tag: "-x"}, ErrInvalid},
		{"tag starting with a dot", BuildOptions{Tag: ".tmp-x"}, ErrInvalid},
		{"tag with a space", BuildOptions{Tag: "a b"}, ErrInvalid},
		{"tag too long", BuildOptions{Tag: strings.Repeat("a", 65)}, ErrInvalid},
		{"pool too big", BuildOptions{Tag: "p", PoolSize: 65}, ErrInvalid},
		{"cpus over max", BuildOptions{Tag: "p", CPUs: testLimits.MaxCPUs + 1}, ErrInvalid},
		{"memory under min", BuildOptions{Tag: "p", MemoryMiB: 1}, ErrInvalid},
		{"unknown image", BuildOptions{Tag: "p", Image: "nope"}, ErrNotFound},
		{"duplicate tag", BuildOptions{Tag: "dup"}, ErrConflict},
		{"warm command fails", BuildOptions{Tag: "p", Warm: "echo broken >&2; exit 3"}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.BuildSnapshot(testCtx(t), tc.opts)
			wantErr(t, err, tc.want)
			if got := e.svc.Snapshots(); len(got) != 1 {
				t.Errorf("Snapshots = %+v, want only dup", got)
			}
			if len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 {
				t.Errorf("failed build left runtime %v, store %v", e.rt.IDs(), e.rows(t))
			}
		})
	}
	// A failed build releases its tag.
	e.build(t, BuildOptions{Tag: "p"})
}

func TestSpawnFromSnapshot(t *testing.T) {
	e := newEnv(t)
	e.build(t, BuildOptions{Tag: "base", CPUs: 2, MemoryMiB: 128})
	startsBefore := e.rt.Starts()
	infos, err := e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "base", N: 2, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if e.rt.Starts() != startsBefore || e.rt.Restores() != 2 {
		t.Errorf("%d starts and %d restores, want 0 and 2", e.rt.Starts()-startsBefore, e.rt.Restores())
	}
	dir := filepath.Join(e.cfg.SnapshotDir, "base")
	for _, info := range infos {
		if info.SnapshotTag != "base" || info.Image != "default-0001" || info.CPUs != 2 || info.MemoryMiB != 128 || info.Token == "" {
			t.Errorf("info = %+v", info)
		}
		if got := e.rt.RestoredFrom(info.ID); got != dir {
			t.Errorf("%s restored from %q, want %q", info.ID, got, dir)
		}
		if got := e.rt.RestoredCalls(info.ID); !slices.Equal(got, []string{info.ID}) {
			t.Errorf("agent of %s told Restored(%v), want once with its id", info.ID, got)
		}
		if spec := e.rt.Spec(info.ID); spec.Rootfs != "fake-rootfs/default-0001" || spec.Kernel != "fake-vm/default-0001/vmlinux" || spec.CPUs != 2 || spec.MemoryMiB != 128 {
			t.Errorf("restore spec = %+v", spec)
		}
		if rec := e.row(t, info.ID); rec.SnapshotTag != "base" || rec.Status != StatusRunning {
			t.Errorf("store record = %+v", rec)
		}
		if got := e.exec(t, info.ID, info.Token, "echo child"); got != "child\n" {
			t.Errorf("exec = %q", got)
		}
	}
	if sn, _ := e.svc.Snapshot("base"); sn.Children != 2 {
		t.Errorf("Children = %d, want 2", sn.Children)
	}

	// A snapshot's sandboxes run with its cpus and memory.
	for _, o := range []CreateOptions{
		{SnapshotTag: "base", CPUs: 1},
		{SnapshotTag: "base", MemoryMiB: 256},
	} {
		_, err := e.svc.Create(testCtx(t), o)
		wantErr(t, err, ErrInvalid)
	}
	if _, err := e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "base", CPUs: 2, MemoryMiB: 128}); err != nil {
		t.Errorf("spawn with the snapshot's own cpus and memory: %v", err)
	}

	// A failed restore leaves nothing.
	e.rt.FailNthRestore(2, errors.New("boom"))
	before := e.rt.IDs()
	_, err = e.svc.Create(testCtx(t), CreateOptions{SnapshotTag: "base", N: 3})
	if err == nil {
		t.Fatal("create with a failing restore succeeded")
	}
	if got := e.rt.IDs(); !slices.Equal(got, before) {
		t.Errorf("runtime holds %v after a failed spawn, want %v", got, before)
	}
}

func TestDeleteSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "base"})
	child := e.createOne(t, CreateOptions{SnapshotTag: "base"})
	wantErr(t, e.svc.DeleteSnapshot(ctx, "base"), ErrConflict)
	if _, err := e.svc.Snapshot("base"); err != nil {
		t.Fatalf("a refused delete removed the snapshot: %v", err)
	}
	if err := e.svc.Delete(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.SnapshotDir, "base")); !os.IsNotExist(err) {
		t.Errorf("snapshot directory still there: %v", err)
	}
	if recs, _ := e.st.Snapshots(ctx); len(recs) != 0 {
		t.Errorf("store still holds %+v", recs)
	}
	_, err := e.svc.Snapshot("base")
	wantErr(t, err, ErrNotFound)
	wantErr(t, e.svc.DeleteSnapshot(ctx, "base"), ErrNotFound)
	_, err = e.svc.Create(ctx, CreateOptions{SnapshotTag: "base"})
	wantErr(t, err, ErrNotFound)
	// The tag is free again.
	e.build(t, BuildOptions{Tag: "base"})
}

// A refill that fails is retried without waiting for another spawn.
func TestWarmPoolRetriesFailedRefill(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.PoolMemoryMiB = 4 * testLimits.DefaultMemoryMiB
		c.PoolRetry = 50 * time.Millisecond
	})
	e.rt.FailNthRestore(1, errors.New("injected restore failure"))
	e.build(t, BuildOptions{Tag: "warm", PoolSize: 2})
	waitFor(t, "the pool to fill after a failed refill", func() bool {
		s, _ := e.svc.Snapshot("warm")
		return s.PoolReady == 2
	})
}

func TestWarmPool(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 4 * testLimits.DefaultMemoryMiB })
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "warm", PoolSize: 2})
	poolReady := func() int { s, _ := e.svc.Snapshot("warm"); return s.PoolReady }
	waitFor(t, "the pool to fill", func() bool { return poolReady() == 2 })

	pooled := e.rt.IDs()
	if len(pooled) != 2 || e.svc.Count() != 0 || len(e.svc.List()) != 0 {
		t.Fatalf("runtime holds %v, %d live; want 2 pooled sandboxes and none live", pooled, e.svc.Count())
	}
	for _, id := range pooled {
		if rec := e.row(t, id); rec.Status != StatusPooled || rec.TokenHash != "" {
			t.Errorf("pooled record = %+v", rec)
		}
		if got := e.rt.RestoredCalls(id); !slices.Equal(got, []string{id}) {
			t.Errorf("pooled %s: Restored(%v)", id, got)
		}
	}

	info := e.createOne(t, CreateOptions{SnapshotTag: "warm", TTL: time.Minute})
	if n := e.svc.Stats().PoolHits.Load(); n != 1 {
		t.Errorf("Stats().PoolHits = %d, want 1", n)
	}
	if !slices.Contains(pooled, info.ID) {
		t.Errorf("created %s, not one of the pooled %v", info.ID, pooled)
	}
	if info.Status != StatusRunning || info.SnapshotTag != "warm" || info.ExpiresAt.Sub(info.CreatedAt) != time.Minute {
		t.Errorf("info = %+v", info)
	}
	if rec := e.row(t, info.ID); rec.Status != StatusRunning || rec.TokenHash != hashToken(info.Token) {
		t.Errorf("handed-out record = %+v", rec)
	}
	if got := e.exec(t, info.ID, info.Token, "echo pooled"); got != "pooled\n" {
		t.Errorf("exec = %q", got)
	}
	waitFor(t, "the pool to refill", func() bool { return poolReady() == 2 })
	if n := e.rt.Restores(); n != 3 {
		t.Errorf("%d restores, want 3", n)
	}

	// Deleting the snapshot destroys its pool.
	wantErr(t, e.svc.DeleteSnapshot(ctx, "warm"), ErrConflict)
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSnapshot(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if len(e.rt.IDs()) != 0 || len(e.rows(t)) != 0 {
		t.Errorf("after DeleteSnapshot: runtime %v, store %v", e.rt.IDs(), e.rows(t))
	}
}

func TestPoolMemoryBudget(t *testing.T) {
	const mem = 128
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 3 * mem })
	e.build(t, BuildOptions{Tag: "p1", MemoryMiB: mem, PoolSize: 2})
	e.build(t, BuildOptions{Tag: "p2", MemoryMiB: mem, PoolSize: 2})

	settled := func() bool {
		e.svc.mu.Lock()
		defer e.svc.mu.Unlock()
		n := 0
		for _, sn := range e.svc.snapshots {
			if sn.filling > 0 {
				return false
			}
			n += len(sn.pool)
		}
		return n == 3
	}
	waitFor(t, "three pooled sandboxes", settled)
	// The filler is idle and has nothing left that fits.
	if sn := e.svc.nextToFill(); sn != nil {
		t.Errorf("nextToFill picked %s past the budget", sn.rec.Tag)
	}
	if got := e.rt.IDs(); len(got) != 3 {
		t.Errorf("runtime holds %d sandboxes, want 3", len(got))
	}
	p1, _ := e.svc.Snapshot("p1")
	p2, _ := e.svc.Snapshot("p2")
	if p1.PoolReady+p2.PoolReady != 3 || p1.PoolReady == 0 || p2.PoolReady == 0 {
		t.Errorf("pools hold %d and %d, want 3 in all, some in each", p1.PoolReady, p2.PoolReady)
	}
}

func TestBranch(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	root := e.createOne(t, CreateOptions{})
	e.exec(t, root.ID, root.Token, "echo root > state.txt")

	// Each step branches the first child of the step before.
	steps := []struct {
		tag        string
		n          int
		wantDepth  int
		wantParent string
	}{
		{"b1", 2, 1, ""},
		{"b2", 1, 2, "b1"},
		{"b3", 0, 3, "b2"},
	}
	from := root
	for _, st := range steps {
		nCheckpoints := len(e.rt.Checkpoints())
		res, err := e.svc.Branch(ctx, from.ID, BranchOptions{Tag: st.tag, N: st.n, TTL: time.Minute})
		if err != nil {
			t.Fatalf("Branch(%s, %s): %v", from.ID, st.tag, err)
		}
		sn := res.Snapshot
		if sn.Tag != st.tag || sn.Depth != st.wantDepth || sn.Parent != st.wantParent || sn.BranchedFrom != from.ID ||
			sn.PoolSize != 0 || sn.Image != "default-0001" || sn.Children != st.n {
			t.Errorf("%s: snapshot = %+v; want depth %d, parent %q, branched from %s, %d children",
				st.tag, sn, st.wantDepth, st.wantParent, from.ID, st.n)
		}
		if res.Pause < 0 {
			t.Errorf("%s: pause %s", st.tag, res.Pause)
		}
		if cps := e.rt.Checkpoints()[nCheckpoints:]; len(cps) != 1 || cps[0].ID != from.ID || !cps[0].LeaveRunning {
			t.Errorf("%s: checkpoints %+v, want one live checkpoint of %s", st.tag, cps, from.ID)
		}
		if len(res.Children) != st.n {
			t.Fatalf("%s: %d children, want %d", st.tag, len(res.Children), st.n)
		}
		for _, c := range res.Children {
			if c.SnapshotTag != st.tag || c.Token == "" || c.ExpiresAt.Sub(c.CreatedAt) != time.Minute {
				t.Errorf("%s: child %+v", st.tag, c)
			}
			if got, want := e.rt.RestoredFrom(c.ID), filepath.Join(e.cfg.SnapshotDir, st.tag); got != want {
				t.Errorf("%s: child restored from %q, want %q", st.tag, got, want)
			}
		}
		// The source keeps running.
		if got := e.exec(t, from.ID, from.Token, "cat state.txt"); got != "root\n" {
			t.Errorf("%s: source after branch: %q", st.tag, got)
		}
		if st.n > 0 {
			from = res.Children[0]
			// The fake restores nothing, so give the child the state it would have.
			e.exec(t, from.ID, from.Token, "echo root > state.txt")
		}
	}

	// A generated tag names the source.
	res, err := e.svc.Branch(ctx, root.ID, BranchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Snapshot.Tag, root.ID+"-") || len(res.Children) != 0 {
		t.Errorf("generated branch = %+v", res)
	}
}

func TestBranchErrors(t *testing.T) {
	e := newEnv(t)
	root := e.createOne(t, CreateOptions{})
	if _, err := e.svc.Branch(testCtx(t), root.ID, BranchOptions{Tag: "taken"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		id   string
		opts BranchOptions
		want error
	}{
		{"n negative", root.ID, BranchOptions{Tag: "x", N: -1}, ErrInvalid},
		{"n over max", root.ID, BranchOptions{Tag: "x", N: MaxN + 1}, ErrInvalid},
		{"ttl negative", root.ID, BranchOptions{Tag: "x", TTL: -time.Second}, ErrInvalid},
		{"ttl over max", root.ID, BranchOptions{Tag: "x", TTL: testLimits.MaxTTL + time.Second}, ErrInvalid},
		{"bad tag", root.ID, BranchOptions{Tag: "../x"}, ErrInvalid},
		{"unknown sandbox", "sb-000000000000", BranchOptions{Tag: "x"}, ErrNotFound},
		{"duplicate tag", root.ID, BranchOptions{Tag: "taken"}, ErrConflict},
		{"children over the limit", root.ID, BranchOptions{Tag: "x", N: testLimits.MaxSandboxes}, ErrLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Branch(testCtx(t), tc.id, tc.opts)
			wantErr(t, err, tc.want)
			if got := e.rt.IDs(); !slices.Equal(got, []string{root.ID}) {
				t.Errorf("runtime holds %v", got)
			}
		})
	}
}

func TestRecoverSnapshots(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.build(t, BuildOptions{Tag: "keep"})
	// What a crash can leave: a checkpoint half written, one without a
	// record, and a record without its checkpoint.
	for _, d := range []string{".tmp-x-0000", "norecord"} {
		if err := os.MkdirAll(filepath.Join(e.cfg.SnapshotDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.PutSnapshot(ctx, store.Snapshot{Tag: "nodir", Backend: "fake", Image: "default-0001", CPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}

	e.restart(t)

	var tags []string
	for _, sn := range e.svc.Snapshots() {
		tags = append(tags, sn.Tag)
	}
	if !slices.Equal(tags, []string{"keep"}) {
		t.Errorf("Snapshots after recover = %v, want [keep]", tags)
	}
	ents, _ := os.ReadDir(e.cfg.SnapshotDir)
	if len(ents) != 1 || ents[0].Name() != "keep" {
		t.Errorf("snapshot directory holds %v, want only keep", ents)
	}
	if recs, _ := e.st.Snapshots(ctx); len(recs) != 1 || recs[0].Tag != "keep" {
		t.Errorf("store holds %+v, want only keep", recs)
	}
	child := e.createOne(t, CreateOptions{SnapshotTag: "keep"})
	if got := e.exec(t, child.ID, child.Token, "echo ok"); got != "ok\n" {
		t.Errorf("exec in a sandbox spawned after recover = %q", got)
	}
}

func TestEnsureSnapshot(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("EnsureSnapshot runs the default warm command, which needs python3")
	}
	e := newEnv(t)
	ctx := testCtx(t)
	images := e.cfg.Images.(*runtimetest.Images)
	image := func() string { sn, _ := e.svc.Snapshot("dflt"); return sn.Image }

	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if got := image(); got != "default-0001" {
		t.Fatalf("built from %q, want default-0001", got)
	}
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rt.Checkpoints()); n != 1 {
		t.Errorf("%d checkpoints; an up-to-date snapshot was rebuilt", n)
	}

	// A new image: the snapshot is rebuilt, but not while it has children.
	child := e.createOne(t, CreateOptions{SnapshotTag: "dflt"})
	images.Set("default", "default-0003")
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if got := image(); got != "default-0001" {
		t.Errorf("a snapshot with children was rebuilt from %q", got)
	}
	if err := e.svc.Delete(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if got := image(); got != "default-0003" {
		t.Errorf("rebuilt from %q, want default-0003", got)
	}
	if n := len(e.rt.Checkpoints()); n != 2 {
		t.Errorf("%d checkpoints, want 2", n)
	}

	// A new runtime version cannot restore the old checkpoint: spawning
	// says so, and EnsureSnapshot rebuilds it.
	e.rt.SetVersion("fake 2")
	e.restart(t)
	_, err := e.svc.Create(ctx, CreateOptions{SnapshotTag: "dflt"})
	wantErr(t, err, ErrConflict)
	if err := e.svc.EnsureSnapshot(ctx, "dflt", "default"); err != nil {
		t.Fatal(err)
	}
	if sn, _ := e.svc.Snapshot("dflt"); sn.RuntimeVersion != "fake 2" {
		t.Errorf("after a runtime upgrade the snapshot records %q", sn.RuntimeVersion)
	}
	e.createOne(t, CreateOptions{SnapshotTag: "dflt"})

	wantErr(t, e.svc.EnsureSnapshot(ctx, "x", "nope"), ErrNotFound)
}
