package usage

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// clock is the meter's time, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(secs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Duration(secs) * time.Second)
}

// links are fake link counters by sandbox id.
type links struct {
	mu sync.Mutex
	in map[string][2]int64
}

func (l *links) set(id string, in, out int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.in[id] = [2]int64{in, out}
}

func (l *links) read(id string) (int64, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.in[id]
	return v[0], v[1], nil
}

// env is a sandbox service over the fake runtime, metered by a Meter.
type env struct {
	t     *testing.T
	st    *store.Store
	rt    *runtimetest.Fake
	clk   *clock
	links *links
	m     *Meter
	svc   *sandbox.Service
}

func newEnv(t *testing.T) *env {
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, rt: runtimetest.New(t), clk: &clock{t: t0}, links: &links{in: map[string][2]int64{}}}
	e.start()
	t.Cleanup(func() { e.svc.Close() })
	return e
}

// start makes a meter and a service and recovers, as a daemon's start does.
func (e *env) start() {
	e.m = New(Config{Store: e.st, Now: e.clk.now, Link: e.links.read, Logger: slog.New(slog.DiscardHandler)})
	e.svc = sandbox.New(sandbox.Config{
		Runtime: e.rt, Store: e.st, Images: runtimetest.NewImages(map[string]string{"default": "default-0001"}),
		DefaultImage: "default", Logger: slog.New(slog.DiscardHandler), StartTimeout: 5 * time.Second,
		SnapshotDir: filepath.Join(e.t.TempDir(), "snapshots"), Meter: e.m,
		Limits: sandbox.Limits{DefaultTTL: time.Hour, MaxTTL: time.Hour, DefaultCPUs: 1, MaxCPUs: 4, DefaultMemoryMiB: 256,
			MaxMemoryMiB: 2048, MaxSandboxes: 10, DefaultDiskMiB: 1024, MaxDiskMiB: 4096, DefaultPids: 256, MaxPids: 1024, OpenFiles: 512},
	})
	if err := e.svc.Recover(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	select {
	case <-e.svc.Recovered():
	case <-time.After(10 * time.Second):
		e.t.Fatal("recovery did not finish")
	}
}

func (e *env) create(ctx context.Context, cpus, mem int) sandbox.Info {
	e.t.Helper()
	infos, err := e.svc.Create(ctx, sandbox.CreateOptions{CPUs: cpus, MemoryMiB: mem})
	if err != nil {
		e.t.Fatal(err)
	}
	return infos[0]
}

func (e *env) exec(info sandbox.Info, n int) {
	e.t.Helper()
	sb, err := e.svc.Open(context.Background(), info.ID, info.Token)
	if err != nil {
		e.t.Fatal(err)
	}
	for range n {
		if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Shell: "true"}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) report(tenantName string) apitype.Usage {
	e.t.Helper()
	u, err := e.m.Report(context.Background(), tenantName, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func (e *env) wantFigures(what string, got apitype.UsageFigures, secs float64, vcpus, memMiB int, execs, in, out int64) {
	e.t.Helper()
	want := apitype.UsageFigures{SandboxSeconds: secs, VCPUSeconds: secs * float64(vcpus), GiBSeconds: secs * float64(memMiB) / 1024,
		Execs: execs, BytesIn: in, BytesOut: out}
	if !near(got.SandboxSeconds, want.SandboxSeconds) || !near(got.VCPUSeconds, want.VCPUSeconds) || !near(got.GiBSeconds, want.GiBSeconds) ||
		got.Execs != want.Execs || got.BytesIn != want.BytesIn || got.BytesOut != want.BytesOut {
		e.t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

func TestMeterLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme := tenant.NewContext(ctx, tenant.Principal{KeyID: "k1", Tenant: "acme"})

	a := e.create(acme, 2, 512)
	b := e.create(ctx, 1, 256)
	e.exec(a, 3)
	e.links.set(a.ID, 1000, 200)
	e.clk.advance(10)
	if err := e.m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.clk.advance(5)

	// A pause stops the clock; the resume's link starts from zero.
	if _, err := e.svc.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	e.clk.advance(100)
	e.links.set(a.ID, 0, 0)
	if _, err := e.svc.Resume(acme, a.ID, 0); err != nil {
		t.Fatal(err)
	}
	e.links.set(a.ID, 50, 0)
	e.exec(a, 1)
	e.clk.advance(20)

	u := e.report("acme")
	e.wantFigures("acme totals", u.Totals, 35, 2, 512, 4, 1000, 200) // the unflushed exec counts; the resumed link's bytes wait for a flush
	if len(u.BySandbox) != 1 || u.BySandbox[0].SandboxID != a.ID || !u.BySandbox[0].Running || u.BySandbox[0].Template != "default-0001" {
		t.Fatalf("acme by sandbox = %+v", u.BySandbox)
	}
	if len(u.ByTemplate) != 1 || u.ByTemplate[0].Template != "default-0001" {
		t.Fatalf("acme by template = %+v", u.ByTemplate)
	}
	if u.InUse != (apitype.UsageInUse{Sandboxes: 1, VCPUs: 2, MemoryMiB: 512}) {
		t.Fatalf("acme in use = %+v", u.InUse)
	}
	e.wantFigures("default totals", e.report(tenant.Default).Totals, 135, 1, 256, 0, 0, 0)
	if tn, _ := e.m.TenantOf(a.ID); tn != "acme" {
		t.Fatalf("TenantOf(%s) = %q, want acme", a.ID, tn)
	}

	// A pause made by the reaper, and a resume by a call of no tenant,
	// keep the sandbox the tenant it was created for.
	if _, err := e.svc.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	e.links.set(a.ID, 0, 0)
	if _, err := e.svc.Resume(ctx, a.ID, 0); err != nil {
		t.Fatal(err)
	}
	e.wantFigures("acme after a second pause", e.report("acme").Totals, 35, 2, 512, 4, 1050, 200)
	if d := e.report(tenant.Default); len(d.BySandbox) != 1 {
		t.Fatalf("default by sandbox = %+v: the resumed sandbox moved tenant", d.BySandbox)
	}

	// A daemon killed: what was flushed stays, the open intervals are
	// adopted and go on accruing while the sandboxes run.
	e.exec(a, 2)
	if err := e.m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.exec(a, 1) // lost with the daemon: never flushed
	// An interval whose sandbox is gone by the restart ends where it was
	// last seen.
	gone, err := e.st.OpenUsageInterval(ctx, store.UsageInterval{SandboxID: "sb-gone", Tenant: "acme", Template: "x", VCPUs: 1, MemoryMiB: 1024, StartedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.FlushUsage(ctx, []store.UsageFlush{{IntervalID: gone, At: t0.Add(7 * time.Second)}}, false); err != nil {
		t.Fatal(err)
	}
	e.svc.Close()
	e.clk.advance(30)
	e.start()
	e.clk.advance(10)
	u = e.report("acme")
	// a ran 35 s before and 40 s since the kill (2 vCPUs, 512 MiB); the
	// gone one 7 s (1 vCPU, 1 GiB).
	if want := (apitype.UsageFigures{SandboxSeconds: 82, VCPUSeconds: 157, GiBSeconds: 44.5, Execs: 6, BytesIn: 1050, BytesOut: 200}); u.Totals != want {
		t.Fatalf("acme after the restart = %+v, want %+v", u.Totals, want)
	}
	var aRow apitype.SandboxUsage
	for _, r := range u.BySandbox {
		if r.SandboxID == a.ID {
			aRow = r
		}
	}
	e.wantFigures("sandbox a after the restart", aRow.UsageFigures, 75, 2, 512, 6, 1050, 200)
	if !aRow.Running {
		t.Fatal("sandbox a not running after the restart")
	}
	if tn, _ := e.m.TenantOf(b.ID); tn != tenant.Default {
		t.Fatalf("TenantOf(%s) after restart = %q", b.ID, tn)
	}

	// A delete ends its interval; its usage stays.
	e.exec(a, 2)
	if err := e.svc.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	e.clk.advance(60)
	for _, r := range e.report("acme").BySandbox {
		if r.SandboxID == a.ID {
			e.wantFigures("sandbox a after its delete", r.UsageFigures, 75, 2, 512, 8, 1050, 200)
		}
	}
	if _, ok := e.m.TenantOf(a.ID); ok {
		t.Fatal("a deleted sandbox's tenant is still remembered")
	}
	open, err := e.st.OpenUsageIntervals(ctx)
	if err != nil || len(open) != 1 || open[0].SandboxID != b.ID {
		t.Fatalf("open intervals = %+v, %v; want only %s's", open, err, b.ID)
	}
}

func TestMeterDeath(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.create(ctx, 1, 1024)
	e.exec(a, 2)
	e.clk.advance(4)
	e.rt.Kill(a.ID, runtime.Exit{Detail: "killed by the test"})
	// Dead is listed before the runtime lets go, which is when the meter
	// stops the interval: the fake clock moves on only after both.
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, _ := e.svc.Get(context.Background(), a.ID)
		if info.Status == sandbox.StatusDead && e.report(tenant.Default).InUse.Sandboxes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sandbox not dead, or still metered as running")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.clk.advance(100)
	u := e.report(tenant.Default)
	e.wantFigures("a dead sandbox", u.Totals, 4, 1, 1024, 2, 0, 0)
	if u.InUse.Sandboxes != 0 || u.BySandbox[0].Running {
		t.Fatalf("a dead sandbox in use: %+v", u)
	}
}
