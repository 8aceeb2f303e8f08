// Package envd is E2B's in-sandbox API (envd) as a facade over cove's
// data plane. PLACEHOLDER on branch s23-e2b-api only: the real package is
// built on branch s23-e2b-envd; delete this file when merging that one.
// Every request fails (501), so nothing built on this passes for working.
package envd

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/cove-sandbox/cove/pkg/client"
)

// EnvdVersion is below every version the SDK accepts, so an SDK run
// against the placeholder fails at create instead of half working.
const EnvdVersion = "0.0.0-missing"

// Config is the shape agreed in /work/wt/e2b-notes.md.
type Config struct {
	Client func(ctx context.Context, sandboxID string) (*client.Client, error)
	Logger *slog.Logger
}

// New answers 501 to everything.
func New(Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "envd is not built into this cove (branch s23-e2b-envd not merged)", http.StatusNotImplemented)
	})
}
