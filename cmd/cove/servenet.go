package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"

	"github.com/cove-sandbox/cove/internal/api"
	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/internal/sandbox"
)

// openNetwork makes the egress policy manager the sandbox service attaches
// every sandbox's network with, and what closes it.
func openNetwork(f serveFlags, log *slog.Logger) (_ sandbox.Network, presets []string, _ func(), _ error) {
	path, err := f.presetsFile()
	if err != nil {
		return nil, nil, nil, err
	}
	var named map[string]netpolicy.Policy
	if path != "" {
		if named, err = netpolicy.LoadPresets(path); err != nil {
			return nil, nil, nil, fmt.Errorf("--network-presets: %w", err)
		}
	}
	// The daemon's own listen addresses are never a sandbox's to reach.
	deny, err := listenPrefixes(f.addr, f.previewHTTPSAddr)
	if err != nil {
		return nil, nil, nil, err
	}
	private, err := f.resolvablePrivate()
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := netpolicy.New(netpolicy.Config{Upstream: f.dnsUpstream, Presets: named, Deny: deny,
		ResolvablePrivate: private, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("network policies: %w", err)
	}
	presets = slices.Sorted(maps.Keys(named))
	log.Info("sandbox networks: deny by default", "presets", path, "dns_upstream", f.dnsUpstream)
	return m, presets, func() {
		if err := m.Close(); err != nil {
			log.Warn("close network policies", "err", err)
		}
	}, nil
}

// openPreview makes the preview proxy the API serves exposed ports with.
// With --preview-https-addr it also returns that listener's TLS config:
// the operator's certificate, or ones from cove's local CA under the state
// dir (a certificate per preview host under a one-label domain such as
// localhost, whose wildcard OpenSSL refuses).
func openPreview(f serveFlags, state string, svc *sandbox.Service, log *slog.Logger) (*preview.Proxy, *tls.Config, string, error) {
	p := preview.New(preview.Config{Domain: f.previewDomain, Backend: api.PreviewBackend(svc), Logger: log})
	if f.previewHTTPSAddr == "" {
		return p, nil, "", nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.previewCert != "" {
		cert, err := tls.LoadX509KeyPair(f.previewCert, f.previewKey)
		if err != nil {
			return nil, nil, "", fmt.Errorf("--preview-cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
		return p, cfg, "", nil
	}
	ca, err := preview.LoadOrCreateCA(filepath.Join(state, "preview-ca"))
	if err != nil {
		return nil, nil, "", fmt.Errorf("preview CA: %w", err)
	}
	cfg.GetCertificate = ca.GetCertificate(f.previewDomain)
	log.Info("HTTPS preview URLs use certificates from cove's local CA: trust it to open them", "ca", ca.PEMPath())
	return p, cfg, ca.PEMPath(), nil
}

// listenPort is l's TCP port; 0 for no listener.
func listenPort(l net.Listener) int {
	if l == nil {
		return 0
	}
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// previewOnly serves preview URLs and nothing else: the HTTPS listener is
// not a second door to the API.
func previewOnly(p *preview.Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := p.Match(r); !ok {
			http.Error(w, "not a preview URL: use PORT-ID."+"<preview domain>", http.StatusNotFound)
			return
		}
		p.ServeHTTP(w, r)
	})
}
