package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/usage"
)

// startMeter starts the usage meter's periodic flushes; stop ends them
// with a last flush, and must run before the store closes.
func startMeter(ctx context.Context, st *store.Store, rt runtime.Runtime, log *slog.Logger) (m *usage.Meter, stop func()) {
	m = usage.New(usage.Config{Store: st, Logger: log, Link: func(id string) (int64, int64, error) {
		return usage.LinkCounters(rt.Netns(id))
	}})
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	return m, func() {
		cancel()
		wg.Wait()
	}
}
