package sandbox

import "context"

// Meter is told when a sandbox starts and stops running and of each
// command started in it (internal/usage meters them per tenant). The
// service calls it at the lifecycle points; calls must not block for long.
type Meter interface {
	// Started: a sandbox began running (a create's or branch's commit, a
	// resume, a rollback's restore).
	Started(ctx context.Context, r MeterRun)
	// Stopped: it stopped running (paused, rolled back, dead, destroyed);
	// its runtime still holds its link. A no-op for one not running.
	Stopped(ctx context.Context, id string)
	// Exec: an exec, background process or terminal was started in it.
	Exec(id string)
	// Gone: it was destroyed.
	Gone(id string)
	// Adopt: at recovery, before anything starts, the recorded running
	// sandboxes (re-attached or found dead later) and the other ones kept.
	Adopt(ctx context.Context, running, kept []string) error
}

// MeterRun is what a sandbox runs as: for whom and from what, with which
// vCPUs and memory.
type MeterRun struct {
	ID, Tenant, Template string
	VCPUs, MemoryMiB     int
}

// noMeter meters nothing: the service's Meter when none is configured.
type noMeter struct{}

func (noMeter) Started(context.Context, MeterRun)               {}
func (noMeter) Stopped(context.Context, string)                 {}
func (noMeter) Exec(string)                                     {}
func (noMeter) Gone(string)                                     {}
func (noMeter) Adopt(context.Context, []string, []string) error { return nil }

// meterRun is b's run for the meter, on behalf of tenantName.
func meterRun(b *box, tenantName string) MeterRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	tmpl := b.rec.SnapshotTag
	if tmpl == "" {
		tmpl = b.rec.Image
	}
	return MeterRun{ID: b.rec.ID, Tenant: tenantName, Template: tmpl, VCPUs: b.rec.CPUs, MemoryMiB: b.rec.MemoryMiB}
}
