package envd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/cove-sandbox/cove/internal/e2b/pb/filesystem/filesystemconnect"
	"github.com/cove-sandbox/cove/internal/e2b/pb/process/processconnect"
	"github.com/cove-sandbox/cove/pkg/client"
)

// EnvdVersion is the envd version the control plane reports. The SDK gates
// features on it; every feature gated at or below it is implemented here:
// recursive watch (0.1.4), stdin:false (0.3.0), the user from Basic auth
// (0.4.0), closeStdin (0.5.2) and octet-stream uploads (0.5.7). File
// metadata (0.6.2) is not, so this stays below it.
const EnvdVersion = "0.5.7"

// Headers of an envd request.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	HeaderAccessToken = "X-Access-Token"
)

// Config is what the facade needs from the daemon.
type Config struct {
	// Client returns a client of cove's own API (loopback) with an API key
	// that may reach sandbox id. The facade adds the request's access token
	// as the sandbox token on every call, so the token is what authorizes.
	Client func(ctx context.Context, sandboxID string) (*client.Client, error)
	// Token, if set, returns sandbox id's plain access token while the
	// control plane holds it; signed /files URLs carry no token, only a
	// hash keyed by it, so without it they answer 401.
	Token func(ctx context.Context, sandboxID string) (string, bool)
	// DefaultUser is the user of a request that names none; "" is the
	// sandbox's own default (cove's agent user, its work directory). E2B's
	// is "user", whose home /home/user relative paths then start at.
	DefaultUser string
	Logger      *slog.Logger
	// MaxWatchers bounds the polling watchers (CreateWatcher) held at once;
	// 0 is 256.
	MaxWatchers int
}

// Server is the envd facade; it is an http.Handler.
type Server struct {
	cfg  Config
	log  *slog.Logger
	h    http.Handler
	ptys *ptyTable
	w    *watcherTable

	homesMu sync.Mutex
	homes   map[string]string // sandbox id → its default directory

	closeOnce sync.Once
	base      context.Context
	cancel    context.CancelFunc
}

// New returns the facade. It speaks HTTP/1.1 and h2c, so serve it on a
// plain listener as it is. Close ends the terminals and watchers it holds.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxWatchers <= 0 {
		cfg.MaxWatchers = 256
	}
	base, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger, ptys: newPTYTable(), w: newWatcherTable(cfg.MaxWatchers), base: base, cancel: cancel,
		homes: map[string]string{}}
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(&processService{s: s}))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{s: s}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", s.getFile)
	mux.HandleFunc("POST /files", s.postFile)
	s.h = h2c.NewHandler(mux, &http2.Server{})
	return s
}

// ServeHTTP routes a request by its E2b-Sandbox-Id header or, without
// one, by a host PORT-ID.<domain> as E2B's own hosts name sandboxes: a
// signed URL fetched as it is (a browser's download) carries no headers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(HeaderSandboxID) == "" {
		if id := sandboxOfHost(r.Host); id != "" {
			r.Header.Set(HeaderSandboxID, id)
		}
	}
	s.h.ServeHTTP(w, r)
}

// sandboxOfHost is the ID in a host "PORT-ID.domain[:port]", or "".
func sandboxOfHost(host string) string {
	label, _, ok := strings.Cut(host, ".")
	if !ok {
		return ""
	}
	port, id, ok := strings.Cut(label, "-")
	if !ok || id == "" {
		return ""
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return ""
	}
	return id
}

// Close ends every terminal and watcher the facade holds.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.ptys.closeAll()
		s.w.closeAll()
	})
}

// target is the sandbox a request is for, and who is asking.
type target struct {
	c     *client.Client
	id    string
	token string
	user  string // "" : the sandbox's default user
	// home is where relative paths start: the user's home, or the
	// sandbox's default directory; "": cove's work directory.
	home string
	// keepalive is how often a quiet stream sends a keepalive.
	keepalive time.Duration
}

var errNoSandbox = errors.New("no " + HeaderSandboxID + " header")

// targetOf resolves a request's sandbox from its headers.
func (s *Server) targetOf(ctx context.Context, h http.Header) (target, error) {
	id := strings.TrimSpace(h.Get(HeaderSandboxID))
	if id == "" {
		return target{}, connect.NewError(connect.CodeInvalidArgument, errNoSandbox)
	}
	tok := h.Get(HeaderAccessToken)
	if tok == "" {
		return target{}, connect.NewError(connect.CodeUnauthenticated, errors.New("no "+HeaderAccessToken+" header"))
	}
	user, err := basicUser(h.Get("Authorization"))
	if err != nil {
		return target{}, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if user == "" {
		user = s.cfg.DefaultUser
	}
	c, err := s.cfg.Client(ctx, id)
	if err != nil {
		return target{}, toConnect(fmt.Errorf("sandbox %s: %w", id, err))
	}
	home, err := s.homeFor(ctx, c, id, user)
	if err != nil {
		return target{}, toConnect(err)
	}
	return target{c: c, id: id, token: tok, user: user, home: home, keepalive: keepaliveOf(h)}, nil
}

// maxHomes bounds the sandboxes whose default directory is remembered.
const maxHomes = 4096

// homeFor is where user's relative paths start in sandbox id: the home of
// a named user, else the sandbox's own default directory (its cwd, or
// its default user's home), which cove fixes at create, so it is asked
// for once per sandbox.
func (s *Server) homeFor(ctx context.Context, c *client.Client, id, user string) (string, error) {
	if user != "" {
		return homeOf(user), nil
	}
	s.homesMu.Lock()
	home, ok := s.homes[id]
	s.homesMu.Unlock()
	if ok {
		return home, nil
	}
	info, err := c.GetSandbox(ctx, id)
	if err != nil {
		return "", fmt.Errorf("sandbox %s: %w", id, err)
	}
	home = info.Cwd
	if home == "" {
		home = homeOf(info.User)
	}
	s.homesMu.Lock()
	if len(s.homes) >= maxHomes {
		clear(s.homes)
	}
	s.homes[id] = home
	s.homesMu.Unlock()
	return home, nil
}

// keepaliveOf is the interval a client asks for in Keepalive-Ping-Interval
// (seconds; the SDK sends 50), within bounds, else keepaliveEvery.
func keepaliveOf(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n < 1 || n > 600 {
		return keepaliveEvery
	}
	return time.Duration(n) * time.Second
}

// basicUser reads the user the SDK sends as Basic base64("user:").
func basicUser(auth string) (string, error) {
	if auth == "" {
		return "", nil
	}
	scheme, val, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", nil // another scheme says nothing about the user
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(val))
	if err != nil {
		return "", fmt.Errorf("the Authorization header is not base64: %w", err)
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return user, nil
}

// toConnect maps cove's API errors onto the Connect codes the SDK reads.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeUnknown
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrTimeout):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, client.ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, client.ErrConflict) && strings.Contains(err.Error(), " is paused"):
		// A paused sandbox is not running, which the SDK reads from
		// unavailable as envd's proxy answers it.
		code = connect.CodeUnavailable
	case errors.Is(err, client.ErrConflict):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, client.ErrBadRequest):
		code = connect.CodeInvalidArgument
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		// The facade's API key may reach the sandbox, so a refusal is the
		// access token's: envd's unauthenticated.
		code = connect.CodeUnauthenticated
	case errors.Is(err, client.ErrGone), errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrBadGateway):
		code = connect.CodeUnavailable
	case errors.Is(err, client.ErrNoSpace), errors.Is(err, client.ErrTooLarge), errors.Is(err, client.ErrLimit), errors.Is(err, client.ErrQuota):
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, err)
}
