package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Restarter restarts the daemon under benchmark as a crash would. Only a
// daemon the bench started itself has one: the user's is never killed.
type Restarter interface {
	// Restart SIGKILLs the daemon, runs whileDown, and starts it again; it
	// returns when the new process started, without waiting for it.
	Restart(ctx context.Context, whileDown func()) (started time.Time, err error)
	// KillSandbox SIGKILLs the runtime processes of sandbox id and says
	// how many there were.
	KillSandbox(id string) int
}

// benchRestart measures a restart with RestartDead sandboxes recorded
// whose runtime processes were killed while the daemon was down: how long
// until it answers /healthz, and until it has checked them all (found
// them dead).
func (b *bencher) benchRestart(ctx context.Context, info apitype.Info) []result {
	healthy := result{Name: "restart_healthz", Unit: unitMs}
	recovered := result{Name: "restart_recovered", Unit: unitMs}
	fail := func(err error) []result {
		healthy.Error, recovered.Error = err.Error(), err.Error()
		return []result{healthy, recovered}
	}
	n := b.o.RestartDead
	sbs, err := b.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: n, TTLSecs: ttlWithin(info, time.Hour)})
	for _, sb := range sbs {
		defer b.destroy(ctx, sb.ID)
	}
	if err != nil {
		return fail(fmt.Errorf("create %d sandboxes: %w", n, err))
	}
	started, err := b.o.Restarter.Restart(ctx, func() {
		for _, sb := range sbs {
			b.o.Restarter.KillSandbox(sb.ID)
		}
	})
	if err != nil {
		return fail(err)
	}
	if err := b.poll(ctx, func() bool { return b.healthy(ctx) }); err != nil {
		return fail(fmt.Errorf("/healthz after the restart: %w", err))
	}
	healthy = latencyResult(healthy.Name, []time.Duration{time.Since(started)})
	if err := b.poll(ctx, func() bool { i, err := b.cl.Info(ctx); return err == nil && i.Recovering == 0 }); err != nil {
		return fail(fmt.Errorf("recovery after the restart: %w", err))
	}
	recovered = latencyResult(recovered.Name, []time.Duration{time.Since(started)})
	b.logf("restart with %d dead sandboxes: /healthz after %.0f ms, all checked after %.0f ms", n, healthy.P50, recovered.P50)
	return []result{healthy, recovered}
}

// healthy reports whether the daemon answers /healthz.
func (b *bencher) healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return b.cl.Health(ctx) == nil
}

// poll calls cond every few milliseconds until it holds, for at most a
// minute.
func (b *bencher) poll(ctx context.Context, cond func() bool) error {
	const timeout = time.Minute
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
