// Package usage meters what each tenant's sandboxes use: the time they run
// (with their vCPUs and memory), the bytes over their network link and the
// commands started in them, durable in the store, and reports it by tenant,
// template and sandbox over a range.
package usage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// DefaultFlushInterval is how often counters reach the store: a daemon
// killed loses at most this much of them, never an interval.
const DefaultFlushInterval = 15 * time.Second

// Config configures a Meter.
type Config struct {
	Store *store.Store
	// Link reads a running sandbox's link counters as the sandbox sees
	// them (in: received); nil counts no bytes.
	Link          func(id string) (in, out int64, err error)
	FlushInterval time.Duration
	Logger        *slog.Logger
	Now           func() time.Time // nil: time.Now
}

// Meter implements sandbox.Meter over the store.
type Meter struct {
	cfg Config
	// flushMu serialises the store writes of flushes and stops, so that a
	// stop's final count never races a flush of the same interval.
	flushMu sync.Mutex
	mu      sync.Mutex
	live    map[string]*run   // running sandboxes, by id
	tenants map[string]string // every sandbox metered and not gone
}

// run is a running sandbox's open interval and its counters: pending
// execs, and the link counters as last written.
type run struct {
	iv            store.UsageInterval
	execs         int64
	netIn, netOut int64
}

var _ sandbox.Meter = (*Meter)(nil)

// New returns a Meter; call Adopt before the service starts sandboxes,
// and Run for its periodic flushes.
func New(cfg Config) *Meter {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Meter{cfg: cfg, live: map[string]*run{}, tenants: map[string]string{}}
}

func (m *Meter) link(id string) (int64, int64, bool) {
	if m.cfg.Link == nil {
		return 0, 0, false
	}
	in, out, err := m.cfg.Link(id)
	if err != nil {
		m.cfg.Logger.Debug("read a sandbox's link counters", "id", id, "err", err)
		return 0, 0, false
	}
	return in, out, true
}

// Started opens an interval for a sandbox that began running. A sandbox
// keeps the tenant and template it was first metered with.
func (m *Meter) Started(ctx context.Context, r sandbox.MeterRun) {
	m.mu.Lock()
	if m.live[r.ID] != nil {
		m.mu.Unlock()
		return
	}
	if t, ok := m.tenants[r.ID]; ok {
		r.Tenant = t
	}
	m.mu.Unlock()
	in, out, _ := m.link(r.ID)
	iv := store.UsageInterval{SandboxID: r.ID, Tenant: r.Tenant, Template: r.Template, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB,
		StartedAt: m.cfg.Now(), NetInSeen: in, NetOutSeen: out}
	id, err := m.cfg.Store.OpenUsageInterval(context.WithoutCancel(ctx), iv)
	if err != nil {
		m.cfg.Logger.Error("meter a sandbox's start; its time goes unmetered until it stops", "id", r.ID, "err", err)
		return
	}
	iv.ID = id
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[r.ID] == nil {
		m.live[r.ID] = &run{iv: iv, netIn: in, netOut: out}
		m.tenants[r.ID] = r.Tenant
	}
}

// Stopped closes the sandbox's open interval, with its last counts.
func (m *Meter) Stopped(ctx context.Context, id string) {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	m.mu.Lock()
	r := m.live[id]
	m.mu.Unlock()
	if r == nil {
		return
	}
	f := m.flushOf(r)
	if err := m.cfg.Store.FlushUsage(context.WithoutCancel(ctx), []store.UsageFlush{f.UsageFlush}, true); err != nil {
		// The interval stays open in the store: the next start closes it
		// where it was last seen.
		m.cfg.Logger.Error("meter a sandbox's stop", "id", id, "err", err)
	}
	m.mu.Lock()
	delete(m.live, id)
	m.mu.Unlock()
}

// Exec counts one command started in a running sandbox.
func (m *Meter) Exec(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.live[id]; r != nil {
		r.execs++
	}
}

// Gone forgets a destroyed sandbox (its usage stays in the store).
func (m *Meter) Gone(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tenants, id)
}

// TenantOf is the tenant a sandbox was metered for.
func (m *Meter) TenantOf(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tenants[id]
	return t, ok
}

// pending is a flush of r with the counts it has not yet written.
type pending struct {
	store.UsageFlush
	r             *run
	execs         int64
	netIn, netOut int64
}

// flushOf reads r's link and makes its flush; m.flushMu is held.
func (m *Meter) flushOf(r *run) pending {
	in, out, ok := m.link(r.iv.SandboxID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok {
		in, out = r.netIn, r.netOut
	}
	p := pending{r: r, execs: r.execs, netIn: in, netOut: out}
	p.UsageFlush = store.UsageFlush{IntervalID: r.iv.ID, At: m.cfg.Now(), NetInSeen: in, NetOutSeen: out}
	c := store.UsageCount{IntervalID: r.iv.ID, SandboxID: r.iv.SandboxID, Tenant: r.iv.Tenant, Template: r.iv.Template,
		Execs: r.execs, BytesIn: delta(in, r.netIn), BytesOut: delta(out, r.netOut)}
	if c.Execs != 0 || c.BytesIn != 0 || c.BytesOut != 0 {
		p.Count = &c
	}
	return p
}

// delta is what a counter grew by from was to now; one that went down was
// reset (a new link) and counts from zero.
func delta(now, was int64) int64 {
	if now < was {
		return now
	}
	return now - was
}

// Flush writes every running sandbox's counts and marks it seen now.
func (m *Meter) Flush(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	m.mu.Lock()
	runs := make([]*run, 0, len(m.live))
	for _, r := range m.live {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	ps := make([]pending, len(runs))
	fs := make([]store.UsageFlush, len(runs))
	for i, r := range runs {
		ps[i] = m.flushOf(r)
		fs[i] = ps[i].UsageFlush
	}
	if err := m.cfg.Store.FlushUsage(ctx, fs, false); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		p.r.execs -= p.execs
		p.r.netIn, p.r.netOut = p.netIn, p.netOut
	}
	return nil
}

// Run flushes every FlushInterval until ctx ends, and once more then.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := m.Flush(context.WithoutCancel(ctx)); err != nil {
				m.cfg.Logger.Warn("flush usage at shutdown", "err", err)
			}
			return
		case <-t.C:
			if err := m.Flush(ctx); err != nil {
				m.cfg.Logger.Warn("flush usage; retried at the next flush", "err", err)
			}
		}
	}
}

// Adopt takes over the intervals an earlier daemon left open: those of
// running (sandboxes that kept running) stay open and go on counting from
// their last flush; any other is closed where it was last seen. kept are
// the other sandboxes still recorded (paused, dead), whose tenants the
// meter remembers.
func (m *Meter) Adopt(ctx context.Context, running, kept []string) error {
	open, err := m.cfg.Store.OpenUsageIntervals(ctx)
	if err != nil {
		return err
	}
	isRunning := map[string]bool{}
	for _, id := range running {
		isRunning[id] = true
	}
	var closed []store.UsageFlush
	m.mu.Lock()
	for _, iv := range open {
		if isRunning[iv.SandboxID] && m.live[iv.SandboxID] == nil {
			m.live[iv.SandboxID] = &run{iv: iv, netIn: iv.NetInSeen, netOut: iv.NetOutSeen}
			continue
		}
		closed = append(closed, store.UsageFlush{IntervalID: iv.ID, At: iv.SeenAt, NetInSeen: iv.NetInSeen, NetOutSeen: iv.NetOutSeen})
	}
	m.mu.Unlock()
	if err := m.cfg.Store.FlushUsage(ctx, closed, true); err != nil {
		return err
	}
	tenants, err := m.cfg.Store.SandboxTenants(ctx, append(append([]string{}, running...), kept...))
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, t := range tenants {
		m.tenants[id] = t
	}
	return nil
}

// Report is tenant's usage in [from, to), with what it runs now; the
// caller adds its quota (WithQuota).
func (m *Meter) Report(ctx context.Context, tenantName string, from, to time.Time) (apitype.Usage, error) {
	ivs, err := m.cfg.Store.UsageIntervals(ctx, tenantName, from, to)
	if err != nil {
		return apitype.Usage{}, err
	}
	counts, err := m.cfg.Store.UsageCounts(ctx, tenantName, from, to)
	if err != nil {
		return apitype.Usage{}, err
	}
	now := m.cfg.Now()
	// Execs not yet flushed happened within the last flush interval: a
	// range reaching into it counts them, so a report is current.
	current := !to.Before(now.Add(-m.cfg.FlushInterval))
	running := map[string]bool{}
	var in apitype.UsageInUse
	m.mu.Lock()
	for id, r := range m.live {
		if r.iv.Tenant != tenantName {
			continue
		}
		running[id] = true
		in.Sandboxes++
		in.VCPUs += r.iv.VCPUs
		in.MemoryMiB += int64(r.iv.MemoryMiB)
		if current && r.execs > 0 {
			counts = append(counts, store.UsageCount{IntervalID: r.iv.ID, SandboxID: id, Tenant: r.iv.Tenant,
				Template: r.iv.Template, Execs: r.execs, At: to.Add(-time.Nanosecond)})
		}
	}
	m.mu.Unlock()
	u := Aggregate(ivs, counts, from, to, now, running)
	u.Tenant, u.InUse = tenantName, in
	return u, nil
}
