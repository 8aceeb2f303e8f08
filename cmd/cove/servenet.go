//go:build netwired

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/internal/sandbox"
)

// openNetwork makes the egress policy manager the sandbox service attaches
// every sandbox's network with, and what closes it.
func openNetwork(f serveFlags, log *slog.Logger) (sandbox.Network, func(), error) {
	path, err := f.presetsFile()
	if err != nil {
		return nil, nil, err
	}
	var presets map[string]netpolicy.Policy
	if path != "" {
		if presets, err = netpolicy.LoadPresets(path); err != nil {
			return nil, nil, fmt.Errorf("--network-presets: %w", err)
		}
	}
	// The daemon's own listen addresses are never a sandbox's to reach.
	deny, err := listenPrefixes(f.addr, f.previewHTTPSAddr)
	if err != nil {
		return nil, nil, err
	}
	private, err := f.resolvablePrivate()
	if err != nil {
		return nil, nil, err
	}
	m, err := netpolicy.New(netpolicy.Config{Upstream: f.dnsUpstream, Presets: presets, Deny: deny,
		ResolvablePrivate: private, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("network policies: %w", err)
	}
	log.Info("sandbox networks: deny by default", "presets", path, "dns_upstream", f.dnsUpstream)
	return m, func() {
		if err := m.Close(); err != nil {
			log.Warn("close network policies", "err", err)
		}
	}, nil
}

// servePreview puts the preview proxy in front of the API: a request for a
// preview URL (by host or by E2B's headers) is the proxy's. With
// --preview-https-addr it also returns that listener's TLS config: the
// operator's certificate, or one from cove's local CA under the state dir.
func servePreview(f serveFlags, state string, svc *sandbox.Service, api http.Handler, log *slog.Logger) (http.Handler, *tls.Config, error) {
	p := preview.New(preview.Config{Domain: f.previewDomain, Backend: previewBackend{svc}, Logger: log})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := p.Match(r); ok {
			p.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
	if f.previewHTTPSAddr == "" {
		return h, nil, nil
	}
	var cert tls.Certificate
	var err error
	if f.previewCert != "" {
		cert, err = tls.LoadX509KeyPair(f.previewCert, f.previewKey)
	} else {
		var ca *preview.CA
		if ca, err = preview.LoadOrCreateCA(filepath.Join(state, "preview-ca")); err == nil {
			cert, err = ca.Certificate(f.previewDomain)
			log.Info("HTTPS preview URLs use a certificate from cove's local CA: trust it to open them", "ca", ca.PEMPath())
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("preview certificate: %w", err)
	}
	return h, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// previewBackend is the sandbox service as the preview proxy sees it: what
// the service does not find is preview.ErrNotFound.
type previewBackend struct{ svc *sandbox.Service }

func (b previewBackend) Exposure(id string, port int) (string, bool, error) {
	token, public, err := b.svc.Exposure(id, port)
	return token, public, previewErr(err)
}

func (b previewBackend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	c, err := b.svc.DialPort(ctx, id, port)
	return c, previewErr(err)
}

func previewErr(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("%w: %v", preview.ErrNotFound, err)
	}
	return err
}
