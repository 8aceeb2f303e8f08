//go:build !netwired

package main

import (
	"crypto/tls"
	"log/slog"
	"net/http"

	"github.com/cove-sandbox/cove/internal/sandbox"
)

// Until internal/netpolicy and internal/preview land, sandboxes get no
// network and there is no preview proxy. servenet.go (build tag netwired)
// has the real wiring; this file goes when that tag does.

func openNetwork(serveFlags, *slog.Logger) (sandbox.Network, func(), error) {
	return nil, func() {}, nil
}

func servePreview(_ serveFlags, _ string, _ *sandbox.Service, api http.Handler, _ *slog.Logger) (http.Handler, *tls.Config, error) {
	return api, nil, nil
}
