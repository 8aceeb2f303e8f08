package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/internal/e2b"
	"github.com/cove-sandbox/cove/internal/e2b/envd"
	"github.com/cove-sandbox/cove/pkg/client"
)

// e2bFlags are serve's flags for the E2B facade: its control plane
// (E2B_API_URL) and envd (E2B_SANDBOX_URL) on listeners of their own, so
// the main port's sandboxd-compatible /sandboxes keep their meaning.
type e2bFlags struct {
	e2bAPI, e2bEnvd, e2bDomain string
}

func (f *e2bFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.e2bAPI, "e2b-api", "", "address to serve E2B's control plane on, for E2B_API_URL (default: off; a port alone is loopback, e.g. :3000)")
	fs.StringVar(&f.e2bEnvd, "e2b-envd", "", "address to serve E2B's envd on, for E2B_SANDBOX_URL (default: off; a port alone is loopback, e.g. :49983)")
	fs.StringVar(&f.e2bDomain, "e2b-domain", "", "domain the E2B facade reports, so the SDK's getHost(port) is PORT-ID.DOMAIN (default: --preview-domain with the HTTPS preview port)")
}

// loopbackDefault makes an address with no host ("":3000") a loopback
// one: the facade listens more widely only when told to.
func loopbackDefault(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// e2bDomainFor is the domain getHost(port) builds hosts under: cove's
// preview proxy, over HTTPS when it is on.
func (f serveFlags) e2bDomainFor(httpPort, httpsPort int) string {
	if f.e2bDomain != "" {
		return f.e2bDomain
	}
	port := httpPort
	if httpsPort != 0 {
		port = httpsPort
	}
	if port == 443 || port == 0 {
		return f.previewDomain
	}
	return f.previewDomain + ":" + strconv.Itoa(port)
}

// startE2B listens on the E2B facade's addresses (those set) and serves
// them until the returned servers are shut down; errors of Serve go to
// errc. Both sides call the daemon's own API on apiURL: the control plane
// with each caller's key, envd with the daemon's key plus the sandbox
// token the SDK sends (which is what authorizes its calls). checkToken
// gives envd the plain token a signed file URL's hash is keyed by. The
// returned func ends envd's terminals and watchers.
func startE2B(ctx context.Context, f serveFlags, apiURL, daemonKey, domain string, checkToken func(context.Context, string) (string, error), newServer func(http.Handler) *http.Server, errc chan<- error, log *slog.Logger) ([]*http.Server, func(), error) {
	var servers []*http.Server
	closeEnvd := func() {}
	start := func(flag, addr string, h http.Handler) error {
		l, err := net.Listen("tcp", loopbackDefault(addr))
		if err != nil {
			return fmt.Errorf("listen on --%s: %w", flag, err)
		}
		srv := newServer(h)
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(l) }()
		log.InfoContext(ctx, "serving the E2B facade", "part", flag, "addr", l.Addr().String())
		return nil
	}
	api := client.New(apiURL, daemonKey, client.WithUserAgent("cove-e2b/"+version))
	if f.e2bEnvd != "" {
		h := envd.New(envd.Config{Logger: log,
			Client: func(context.Context, string) (*client.Client, error) { return api, nil },
			Token: func(ctx context.Context, id string) (string, bool) {
				tok, err := checkToken(ctx, id)
				return tok, err == nil
			}})
		closeEnvd = func() { h.Close() }
		if err := start("e2b-envd", f.e2bEnvd, h); err != nil {
			return servers, closeEnvd, err
		}
	}
	if f.e2bAPI != "" {
		h := e2b.New(e2b.Config{API: api, EnvdVersion: envd.EnvdVersion, Domain: domain, DefaultSnapshot: f.defaultSnap, Logger: log,
			User: e2b.DefaultUser, Cwd: e2b.DefaultCwd})
		if err := start("e2b-api", f.e2bAPI, h); err != nil {
			return servers, closeEnvd, err
		}
	}
	return servers, closeEnvd, nil
}

// tokenSealKey is the key sandbox tokens are sealed with in the store,
// derived from the daemon's own key, so a restarted daemon (same token
// file) still opens them; a new token file leaves old ones unopenable.
func tokenSealKey(daemonKey string) []byte {
	if daemonKey == "" {
		return nil
	}
	k := sha256.Sum256([]byte("cove sandbox token seal\x00" + daemonKey))
	return k[:]
}
