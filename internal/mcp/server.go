// Package mcp serves cove's sandboxes as Model Context Protocol tools, over
// stdio (cove mcp) and Streamable HTTP (the daemon's /mcp). Every tool maps
// onto the REST API through pkg/client, so both transports share one code
// path with the CLI and the tests.
package mcp

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// API is the part of *client.Client the tools use. An interface keeps the
// tools testable without a daemon.
type API interface {
	BaseURL() string
	Version(ctx context.Context) (apitype.VersionResponse, error)
	Info(ctx context.Context) (apitype.Info, error)

	ListSnapshots(ctx context.Context) ([]apitype.SnapshotInfo, error)
	CreateSandboxes(ctx context.Context, req apitype.CreateSandboxRequest) ([]apitype.SandboxInfo, error)
	ListSandboxes(ctx context.Context) ([]apitype.SandboxInfo, error)
	GetSandbox(ctx context.Context, id string) (apitype.SandboxInfo, error)
	SandboxMetrics(ctx context.Context, id string) (apitype.SandboxMetrics, error)
	DeleteSandbox(ctx context.Context, id string) error
	Extend(ctx context.Context, id string, ttlSecs int64) (apitype.SandboxInfo, error)
	SetNetwork(ctx context.Context, id string, p apitype.NetworkPolicy) (apitype.SandboxInfo, error)
	Branch(ctx context.Context, id, token string, req apitype.BranchRequest) (apitype.BranchResponse, error)
	SnapshotSandbox(ctx context.Context, id, token string, req apitype.BranchRequest) (apitype.BranchResponse, error)

	Ping(ctx context.Context, id, token string) (apitype.PingResponse, error)
	ExposePort(ctx context.Context, id, token string, port int, public bool) (apitype.PortInfo, error)
	Exec(ctx context.Context, id, token string, req apitype.ExecRequest) (apitype.ExecResponse, error)
	Eval(ctx context.Context, id, token string, req apitype.EvalRequest) (apitype.EvalResponse, error)
	Wait(ctx context.Context, id, token string, req apitype.WaitRequest) (apitype.WaitResponse, error)
	ListFiles(ctx context.Context, id, token, path string, depth int) (apitype.ListFilesResponse, error)
	PutFileAs(ctx context.Context, id, token, path string, mode fs.FileMode, user string, r io.Reader, size int64) (apitype.FileInfo, error)
	GetFile(ctx context.Context, id, token, path string) (io.ReadCloser, apitype.FileInfo, error)
	GetFileRange(ctx context.Context, id, token, path string, offset, length int64) (io.ReadCloser, apitype.FileInfo, error)
	Stat(ctx context.Context, id, token, path string) (apitype.FileInfo, error)
	MakeDir(ctx context.Context, id, token, path string, mode fs.FileMode) (apitype.FileInfo, error)
	Move(ctx context.Context, id, token, from, to string, overwrite bool) (apitype.FileInfo, error)
	Remove(ctx context.Context, id, token, path string, recursive bool) error

	StartProcess(ctx context.Context, id, token string, req apitype.ExecRequest) (apitype.ProcessInfo, error)
	Processes(ctx context.Context, id, token string, all bool) ([]apitype.ProcessInfo, error)
	Process(ctx context.Context, id, token, ref string) (apitype.ProcessInfo, error)
	ProcessOutput(ctx context.Context, id, token, ref string, offset, limit int64) (apitype.ProcessOutput, error)
	WriteStdin(ctx context.Context, id, token, ref string, r io.Reader, closeAfter bool) (apitype.StdinResponse, error)
	Signal(ctx context.Context, id, token, ref, sig string) (apitype.ProcessInfo, error)

	PauseSandbox(ctx context.Context, id string) (apitype.SandboxInfo, error)
	ResumeSandbox(ctx context.Context, id string, ttlSecs int64) (apitype.SandboxInfo, error)
	Checkpoint(ctx context.Context, id, token, name string) (apitype.CheckpointInfo, error)
	Rollback(ctx context.Context, id, token, name string) (apitype.SandboxInfo, error)

	Usage(ctx context.Context, q client.UsageQuery) (apitype.Usage, error)
}

// Config configures a Server.
type Config struct {
	API     API
	Version string // cove's version, reported by get_service_info
	Logger  *slog.Logger
	// SessionTimeout closes an HTTP session idle this long, and with it
	// the sandbox sandbox_run made for it. Zero means an hour.
	SessionTimeout time.Duration

	// ForKey, if set, is the API as the holder of an API key sees it: over
	// HTTP each tool call acts with the key of the request that carried
	// it, so a tenant's session sees only its tenant. Nil: API for all.
	ForKey func(key string) API
	// Caller, if set, names the key an HTTP request authenticated as (the
	// daemon's auth runs first). A session is bound to the key that opened
	// it: a request with another key on it is refused, and
	// CloseSessionsOf(caller) ends it.
	Caller func(ctx context.Context) string
}

// Server is the MCP server: one set of tools, any number of sessions, each
// with its own memory of sandbox tokens.
type Server struct {
	api API
	cfg Config
	log *slog.Logger
	srv *sdk.Server

	mu       sync.Mutex
	sessions map[*sdk.ServerSession]*session
	// owners are the HTTP sessions' callers (Config.Caller) by session id.
	owners map[string]string
	// ending counts the sessions whose end is being cleaned up after, so
	// that Close (and with it `cove mcp`) waits for that rather than exit
	// in the middle of a kill.
	ending sync.WaitGroup
}

// New returns a Server with every tool registered.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = time.Hour
	}
	// The SDK logs every session's start and end at info: too chatty for
	// the daemon's log.
	quiet := slog.New(minLevel{cfg.Logger.Handler(), slog.LevelWarn})
	s := &Server{api: cfg.API, cfg: cfg, log: quiet, sessions: make(map[*sdk.ServerSession]*session),
		owners: make(map[string]string)}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "cove", Title: "cove sandboxes", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       quiet,
		// Tokens and sandbox_run's sandbox live in the session, so only
		// the protocol versions that have sessions are offered; newer
		// clients fall back to them.
		SupportedProtocolVersions: sessionfulVersions(),
		// Tools only: no logging capability to advertise.
		Capabilities: &sdk.ServerCapabilities{},
	})
	s.addTools()
	return s
}

const instructions = `cove runs disposable, isolated Linux sandboxes (Debian with python3, node, git) that start from snapshots in well under a second and can be branched copy-on-write while running. Use them instead of the host shell for untrusted code, experiments, installs and anything destructive.
Quick start: sandbox_run runs a shell command in this session's own sandbox, created on first use. For more control: create_sandbox or spawn_sandboxes (from a snapshot listed by list_snapshots), then exec_command, eval_code, write_file, read_file, list_files, wait_for_text; branch_sandbox forks a running sandbox to try alternatives; kill_sandbox when done.
Sandbox tokens: create/spawn/branch results carry each sandbox's token once; this session remembers them, so sandbox_token can be omitted for sandboxes it made. Sandboxes expire (see expires_in_secs); extend_sandbox keeps one alive.
Network: a sandbox reaches nothing unless its network policy allows it: give create_sandbox or spawn_sandboxes a network (allow_domains such as pypi.org, allow_cidrs, presets such as pypi; get_service_info lists the presets), or change a running sandbox's with set_network. expose_port gives a URL (and a token) for a server running in a sandbox.`

// sessionfulVersions are the protocol versions the SDK supports that
// still have sessions (before the sessionless 2026-07-28 revision).
func sessionfulVersions() []string {
	var out []string
	for _, v := range sdk.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			out = append(out, v)
		}
	}
	return out
}

// maxMessage bounds one MCP message, on either transport: write_file
// carries a whole file in one, and the SDK's defaults (4 MiB over HTTP,
// 16 MiB over stdio) would cap files far below the REST API's JSON bound.
const maxMessage = 64 << 20

// Handler returns the Streamable HTTP handler: one MCP session per client.
// The daemon wraps it in its API-key check; here each request's bearer
// key is taken for its tool calls, and its caller (Config.Caller) bound
// to the session, so that nobody else's key can use it.
func (s *Server) Handler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		SessionTimeout:      s.cfg.SessionTimeout,
		Logger:              s.log,
		MaxRequestBodyBytes: maxMessage,
	})
	verify := func(ctx context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
		ti := &auth.TokenInfo{Extra: map[string]any{keyExtra: key}}
		if s.cfg.Caller != nil {
			ti.UserID = s.cfg.Caller(ctx)
		}
		return ti, nil
	}
	owned := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Caller != nil && r.Header.Get(sessionIDHeader) == "" {
			// A new session: its id is in the answer's header.
			caller := s.cfg.Caller(r.Context())
			w = &ownerWriter{ResponseWriter: w, noted: func(id string) { s.own(id, caller) }}
		}
		h.ServeHTTP(w, r)
	})
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(owned)
}

// keyExtra is where a request's key is kept in its token info.
const keyExtra = "cove_api_key"

// ownerWriter notes the session id an initialize answer hands out.
type ownerWriter struct {
	http.ResponseWriter
	noted func(id string)
	done  bool
}

func (w *ownerWriter) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if id := w.Header().Get(sessionIDHeader); id != "" {
			w.noted(id)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *ownerWriter) Write(p []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController flush SSE through w.
func (w *ownerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

const sessionIDHeader = "Mcp-Session-Id"

// own records session id as owner's, and forgets the sessions that ended.
func (s *Server) own(id, owner string) {
	if owner == "" {
		return
	}
	live := map[string]bool{}
	for ss := range s.srv.Sessions() {
		live[ss.ID()] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.owners {
		if !live[k] {
			delete(s.owners, k)
		}
	}
	s.owners[id] = owner
}

// CloseSessionsOf ends every HTTP session caller opened (its key was
// revoked) and returns how many: their streams close, and what
// sandbox_run made is killed.
func (s *Server) CloseSessionsOf(caller string) int {
	s.mu.Lock()
	ids := map[string]bool{}
	for id, c := range s.owners {
		if c == caller {
			ids[id] = true
			delete(s.owners, id)
		}
	}
	s.mu.Unlock()
	n := 0
	for ss := range s.srv.Sessions() {
		if ids[ss.ID()] {
			ss.Close()
			n++
		}
	}
	return n
}

type apiKey struct{}

// withCaller returns ctx carrying the API of the caller of req, if it
// came over HTTP with a key and the server acts per key.
func (s *Server) withCaller(ctx context.Context, req *sdk.CallToolRequest) context.Context {
	if s.cfg.ForKey == nil || req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return ctx
	}
	key, _ := req.Extra.TokenInfo.Extra[keyExtra].(string)
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, apiKey{}, s.cfg.ForKey(key))
}

// apiOf is the API to call for ctx's caller.
func (s *Server) apiOf(ctx context.Context) API {
	if a, ok := ctx.Value(apiKey{}).(API); ok {
		return a
	}
	return s.api
}

// RunStdio serves one session over stdin and stdout until the client
// closes it or ctx ends, then kills the sandbox sandbox_run made for it.
func (s *Server) RunStdio(ctx context.Context) error {
	err := s.srv.Run(ctx, &sdk.StdioTransport{MaxLineLength: maxMessage})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s.Close(cctx)
	if ctx.Err() != nil {
		return nil // told to stop: a normal end
	}
	return err
}

// Close ends every session's state, killing the sandboxes sandbox_run made.
func (s *Server) Close(ctx context.Context) {
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for ss, st := range s.sessions {
		all = append(all, st)
		delete(s.sessions, ss)
	}
	s.mu.Unlock()
	for _, st := range all {
		s.endSession(ctx, st)
	}
	s.ending.Wait()
}

// session returns the state of the session req arrived on, creating it
// on first use. Its sandbox_run sandbox is killed when the session ends.
func (s *Server) session(req *sdk.CallToolRequest) *session {
	ss := req.Session
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		return st
	}
	st := newSession()
	st.api = s.apiOf(s.withCaller(context.Background(), req))
	s.sessions[ss] = st
	if ss != nil {
		go func() {
			ss.Wait()
			s.mu.Lock()
			_, live := s.sessions[ss]
			delete(s.sessions, ss)
			if live {
				s.ending.Add(1)
			}
			s.mu.Unlock()
			if live {
				defer s.ending.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s.endSession(ctx, st)
			}
		}()
	}
	return st
}

func (s *Server) endSession(ctx context.Context, st *session) {
	id := st.takeRunSandbox()
	if id == "" {
		return
	}
	// Not found is fine: it expired, or the model killed it. A session
	// ends by its key's revocation too: then the daemon's own key kills.
	api := st.api
	if api == nil {
		api = s.api
	}
	err := api.DeleteSandbox(ctx, id)
	if errors.Is(err, client.ErrUnauthorized) && api != s.api {
		err = s.api.DeleteSandbox(ctx, id)
	}
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		s.log.Warn("mcp: kill the session's sandbox_run sandbox", "sandbox", id, "err", err)
	}
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
