package api

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/obs"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// maxExecTimeout bounds timeout_secs on exec, eval and wait.
const maxExecTimeout = 24 * time.Hour

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apitype.VersionResponse{Version: s.cfg.Version})
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Info(r.Context()))
}

// sandboxInfo is a sandbox as the API shows it. Its ports go without their
// tokens: only the sandbox's token shows those (GET .../ports).
func (s *Server) sandboxInfo(i sandbox.Info) apitype.SandboxInfo {
	out := apitype.SandboxInfo{
		ID: i.ID, Status: i.Status, Backend: i.Backend, Image: i.Image, SnapshotTag: i.SnapshotTag,
		CPUs: i.CPUs, MemoryMiB: i.MemoryMiB, DiskMiB: i.DiskMiB, Pids: i.Pids, CreatedAtUnix: i.CreatedAt.Unix(),
		ExpiresAtUnix: i.ExpiresAt.Unix(), Token: i.Token, DeadReason: i.DeadReason, DiedAtUnix: unixOrZero(i.DiedAt),
		Network: apitype.NetworkPolicy(i.Network), Labels: i.Labels, User: i.User, Env: i.Env, Cwd: i.Cwd,
		AutoResume: i.AutoResume, OnExpiry: i.OnExpiry, PausedAtUnix: unixOrZero(i.PausedAt),
		RemainingTTLSecs: int64(i.Remaining.Seconds()), PausedBytes: i.PausedBytes, CheckpointBytes: i.CheckpointBytes,
		DiskBytes: i.PausedBytes + i.CheckpointBytes,
	}
	for _, p := range i.Ports {
		pi := s.portInfo(i.ID, p)
		pi.Token = ""
		out.Ports = append(out.Ports, pi)
	}
	return out
}

// unixOrZero is t in Unix seconds, 0 for the zero time.
func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, maxN int) ([]sandbox.Info, bool) {
	var req apitype.CreateSandboxRequest
	if err := decode(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	if maxN == 1 && req.N > 1 {
		s.fail(w, r, fmt.Errorf("%w: POST /sandboxes makes one sandbox: use POST /v1/sandboxes for n > 1", sandbox.ErrInvalid))
		return nil, false
	}
	infos, err := s.svc.Create(r.Context(), sandbox.CreateOptions{
		Image: req.Image, SnapshotTag: req.SnapshotTag, N: req.N, TTL: ttl(req.TTLSecs),
		CPUs: req.CPUs, MemoryMiB: req.MemoryMiB, DiskMiB: req.DiskMiB, Pids: req.Pids, SnapshotToken: sandboxToken(r),
		Network: policy(req.Network), Labels: req.Labels, User: req.User, Env: req.Env, Cwd: req.Cwd,
		AutoResume: req.AutoResume, OnExpiry: req.OnExpiry,
	})
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	noteCreate(r, req, infos)
	return infos, true
}

// noteCreate tells the metrics and the audit log what a create made: a
// spawn when it made several, or started from a snapshot; the sandbox id
// (the first's) the route does not name.
func noteCreate(r *http.Request, req apitype.CreateSandboxRequest, infos []sandbox.Info) {
	o := obs.FromContext(r.Context())
	if o == nil || len(infos) == 0 {
		return
	}
	o.SandboxID = infos[0].ID
	if len(infos) > 1 || req.SnapshotTag != "" {
		o.Op = "spawn"
	}
}

func (s *Server) createSandboxes(w http.ResponseWriter, r *http.Request) {
	infos, ok := s.create(w, r, apitype.MaxN)
	if !ok {
		return
	}
	out := make([]apitype.SandboxInfo, len(infos))
	for i, info := range infos {
		out[i] = s.sandboxInfo(info)
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) compatCreate(w http.ResponseWriter, r *http.Request) {
	// The answer names one sandbox, so only one may be made; the whole
	// request is checked before anything starts.
	infos, ok := s.create(w, r, 1)
	if !ok {
		return
	}
	writeJSON(w, http.StatusCreated, apitype.CompatCreateResponse{ID: infos[0].ID, Token: infos[0].Token})
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	infos, err := s.listLabeled(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]apitype.SandboxInfo, len(infos))
	for i, info := range infos {
		out[i] = s.sandboxInfo(info)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxInfo(info))
}

// sandboxToken gives a sandbox's token again, to a key of its tenant
// with reveal_tokens: what E2B's connect needs (internal/e2b).
func (s *Server) sandboxToken(w http.ResponseWriter, r *http.Request) {
	tok, err := s.svc.RevealToken(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, apitype.SandboxTokenResponse{Token: tok})
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) extend(w http.ResponseWriter, r *http.Request) {
	var req apitype.ExtendRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := s.svc.Extend(r.Context(), r.PathValue("id"), ttl(req.TTLSecs))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxInfo(info))
}

func (s *Server) ping(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	res, err := sb.Ping(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.ObserveAgentRTT(res.RTT)
	writeJSON(w, http.StatusOK, apitype.PingResponse{OK: true, Hostname: res.Hostname, UptimeMs: res.Uptime.Milliseconds(), LatencyUs: res.RTT.Microseconds()})
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.ExecRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	args := req.Args
	if len(req.Cmd) > 0 {
		if len(args) > 0 {
			s.fail(w, r, fmt.Errorf("%w: give args or cmd, not both", sandbox.ErrInvalid))
			return
		}
		args = req.Cmd
	}
	timeout, err := secs("timeout_secs", req.TimeoutSecs, maxExecTimeout)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	env, err := sandbox.EnvList(req.Env)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ereq := sandbox.ExecRequest{Args: args, Shell: req.Shell, Cwd: req.Cwd, Env: env, Timeout: timeout, User: req.User}
	if req.Stdin != "" {
		ereq.Stdin = []byte(req.Stdin)
	}
	if req.Background {
		s.startProcess(w, r, sb, ereq, req)
		return
	}
	if wantsStream(r) {
		s.execStream(w, r, sb, ereq)
		return
	}
	res, err := sb.Exec(r.Context(), ereq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.ExecResponse{
		Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode,
		TimedOut: res.TimedOut, Truncated: res.Truncated, DurationMs: res.Duration.Milliseconds(),
	})
}

func (s *Server) eval(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.EvalRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	timeout, err := secs("timeout_secs", req.TimeoutSecs, maxExecTimeout)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := sb.Eval(r.Context(), sandbox.EvalRequest{Code: req.Code, Timeout: timeout})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.EvalResponse{Result: res.Result, Error: res.Error, ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr})
}

func fileInfo(i sandbox.FileInfo) apitype.FileInfo {
	return apitype.FileInfo{Path: i.Path, Type: i.Type, Size: i.Size, Mode: fmt.Sprintf("%04o", i.Mode), MtimeUnix: i.ModTime.Unix(), Target: i.Target, SHA256: i.SHA256}
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	s.put(w, r, sb, r.URL.Query().Get("path"))
}

// compatPutFile is sandboxd's PUT /sandboxes/{id}/files/{path}: the path is
// relative to the working directory, as sandboxd has it. An absolute one
// (a leading %2F) is refused rather than taken: the v1 route takes those.
func (s *Server) compatPutFile(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	p := r.PathValue("path")
	if strings.HasPrefix(p, "/") {
		s.fail(w, r, fmt.Errorf("%w: the path %.200q is absolute; this route takes one relative to %s (use PUT /v1/sandboxes/{id}/files?path=... for any path)", sandbox.ErrInvalid, p, sandbox.WorkDir))
		return
	}
	s.put(w, r, sb, p)
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox, path string) {
	mode, err := apitype.ParseMode(r.URL.Query().Get("mode"))
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: %v", sandbox.ErrInvalid, err))
		return
	}
	info, err := sb.Put(r.Context(), sandbox.PutRequest{Path: path, Mode: mode, User: r.URL.Query().Get("user")}, r.Body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(info))
}

// getFile streams a file. A whole file is sent as it is read, to its end,
// without a Content-Length: procfs and sysfs files say they are empty, and
// a file may grow or shrink while it is read. X-File-Size is its size when
// opened. A range, from `offset`/`length` query parameters or a single
// `Range: bytes=a-b` header, answers 206 with exactly those bytes of the
// file as it was opened, so that large files can be read in pieces; if the
// file shrinks meanwhile, the connection is cut.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	req, ranged, err := fileRange(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info, rc, err := sb.Get(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	span := req.Span(info.Size)
	h := w.Header()
	if ranged && span == 0 {
		// No byte to send: RFC 9110's answer, naming the size to ask within.
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
		writeError(w, http.StatusRequestedRangeNotSatisfiable, apitype.CodeBadRequest,
			fmt.Sprintf("the range at offset %d holds no byte of %s (%d bytes)", req.Offset, info.Path, info.Size))
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-File-Mode", fmt.Sprintf("%04o", info.Mode))
	h.Set("X-File-Size", strconv.FormatInt(info.Size, 10))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	status := http.StatusOK
	if ranged {
		status = http.StatusPartialContent
		h.Set("Content-Length", strconv.FormatInt(span, 10))
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", req.Offset, req.Offset+span-1, info.Size))
	}
	w.WriteHeader(status)
	if n, err := io.Copy(w, rc); err != nil || (ranged && n != span) {
		// The status is sent; cutting the connection is the only way left
		// to tell the client the content is incomplete (a chunked body
		// then lacks its last chunk).
		s.log.Warn("file download cut short", "sandbox", sb.ID(), "path", info.Path, "sent", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// fileRange reads the part of a file a GET asks for.
func fileRange(r *http.Request) (sandbox.GetRequest, bool, error) {
	q := r.URL.Query()
	req := sandbox.GetRequest{Path: q.Get("path")}
	bad := func(what string) error {
		return fmt.Errorf("%w: %s: want non-negative byte counts", sandbox.ErrInvalid, what)
	}
	var err error
	ranged := false
	if v := q.Get("offset"); v != "" {
		if req.Offset, err = strconv.ParseInt(v, 10, 64); err != nil || req.Offset < 0 {
			return req, false, bad("offset " + v)
		}
		ranged = true
	}
	if v := q.Get("length"); v != "" {
		if req.Length, err = strconv.ParseInt(v, 10, 64); err != nil || req.Length < 0 {
			return req, false, bad("length " + v)
		}
		ranged = true
	}
	if v := r.Header.Get("Range"); v != "" && !ranged {
		// One range, "bytes=a-" or "bytes=a-b"; suffix and multiple ranges
		// are not served.
		spec, ok := strings.CutPrefix(v, "bytes=")
		a, b, dash := strings.Cut(spec, "-")
		if !ok || !dash || a == "" || strings.Contains(b, ",") {
			return req, false, bad("Range " + v)
		}
		if req.Offset, err = strconv.ParseInt(a, 10, 64); err != nil || req.Offset < 0 {
			return req, false, bad("Range " + v)
		}
		if b != "" {
			end, err := strconv.ParseInt(b, 10, 64)
			if err != nil || end < req.Offset {
				return req, false, bad("Range " + v)
			}
			req.Length = end - req.Offset + 1
		}
		ranged = true
	}
	return req, ranged, nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	q := r.URL.Query()
	path := q.Get("path")
	if path == "" {
		path = sandbox.WorkDir
	}
	depth := 1
	if d := q.Get("depth"); d != "" {
		var err error
		if depth, err = strconv.Atoi(d); err != nil || depth < 1 {
			s.fail(w, r, fmt.Errorf("%w: depth must be a positive integer", sandbox.ErrInvalid))
			return
		}
	}
	res, err := sb.List(r.Context(), sandbox.ListRequest{Path: path, Depth: depth})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apitype.ListFilesResponse{Entries: make([]apitype.FileInfo, len(res.Entries)), Truncated: res.Truncated}
	for i, e := range res.Entries {
		out.Entries[i] = fileInfo(e)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.WaitRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	timeout, err := secs("timeout_secs", req.TimeoutSecs, maxExecTimeout)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := sb.Wait(r.Context(), sandbox.WaitRequest{Path: req.Path, Text: req.Text, Timeout: timeout})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.WaitResponse{Found: res.Found, ElapsedMs: res.Elapsed.Milliseconds()})
}
