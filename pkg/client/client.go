// Package client is a Go client for cove's REST API.
//
// Control-plane calls (create, list, delete, ...) authenticate with the
// daemon's API key. Data-plane calls (ping, exec, eval, files, wait) also
// carry the sandbox token, the sandbox's own credential, which the daemon
// returns only once, from CreateSandboxes or Branch.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// DefaultTimeout bounds a call that is not a file transfer, unless changed
// with WithTimeout.
const DefaultTimeout = 2 * time.Minute

// Client talks to one cove daemon. It is safe for concurrent use.
type Client struct {
	base    string // without a trailing slash
	apiKey  string
	hc      *http.Client
	timeout time.Duration
	ua      string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc. hc's own
// Timeout, if any, also applies to file transfers, so it is best left zero.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithTimeout bounds each call other than PutFile and GetFile, which only
// their context bounds. Exec, Eval and Wait get their own TimeoutSecs on
// top. Zero means no bound beyond the context.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.ua = ua }
}

// New returns a Client for the daemon at baseURL, such as
// "http://127.0.0.1:8080", authenticating with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base:    strings.TrimRight(baseURL, "/"),
		apiKey:  apiKey,
		timeout: DefaultTimeout,
		ua:      "cove-client",
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport()}
	}
	return c
}

// newTransport bounds each step of setting up a connection, but not the
// request as a whole: exec and file transfers legitimately take long, and
// contexts bound those.
func newTransport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 2 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          100,
		// Tools like cove bench and agents running many execs in parallel
		// talk to a single host; keep their connections warm.
		MaxIdleConnsPerHost: 32,
		// Bigger than the 4 KiB default, for multi-gigabyte file transfers.
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
	}
}

// BaseURL returns the daemon's URL as given to New, less a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// APIKey is the key c authenticates with (for a tool that hands it to
// another client, such as cove bench to the E2B SDK).
func (c *Client) APIKey() string { return c.apiKey }

// Health checks GET /healthz, which needs no API key.
func (c *Client) Health(ctx context.Context) error {
	var out struct {
		OK bool `json:"ok"`
	}
	if err := c.call(ctx, 0, http.MethodGet, "/healthz", nil, "", nil, &out); err != nil {
		return err
	}
	if !out.OK {
		return fmt.Errorf("cove: daemon reports unhealthy")
	}
	return nil
}

// Version returns the daemon's version.
func (c *Client) Version(ctx context.Context) (apitype.VersionResponse, error) {
	var out apitype.VersionResponse
	err := c.call(ctx, 0, http.MethodGet, "/version", nil, "", nil, &out)
	return out, err
}

// Info returns the daemon's backend, versions and limits.
func (c *Client) Info(ctx context.Context) (apitype.Info, error) {
	var out apitype.Info
	err := c.call(ctx, 0, http.MethodGet, "/v1/info", nil, "", nil, &out)
	return out, err
}

// CreateSandboxes creates req.N sandboxes (1 if N is 0), cold from an
// image or restored from req.SnapshotTag (one saved from a sandbox takes
// that sandbox's token, req.SandboxToken). The result is the only place
// their sandbox tokens appear; keep them. A call for more than one sandbox gets
// SlowTimeout on top of the Client's timeout.
func (c *Client) CreateSandboxes(ctx context.Context, req apitype.CreateSandboxRequest) ([]apitype.SandboxInfo, error) {
	var extra time.Duration
	if req.N > 1 {
		extra = SlowTimeout
	}
	var out []apitype.SandboxInfo
	err := c.call(ctx, extra, http.MethodPost, "/v1/sandboxes", nil, req.SandboxToken, req, &out)
	return out, err
}

// SlowTimeout is the extra time, beyond the Client's timeout, given to
// calls that checkpoint or boot a sandbox: CreateSnapshot, Branch and
// SnapshotSandbox.
const SlowTimeout = 10 * time.Minute

// CreateSnapshot boots a sandbox, runs req.Warm in it and saves it as the
// snapshot req.Tag. It can take a minute or more.
func (c *Client) CreateSnapshot(ctx context.Context, req apitype.CreateSnapshotRequest) (apitype.SnapshotInfo, error) {
	var out apitype.SnapshotInfo
	err := c.call(ctx, SlowTimeout, http.MethodPost, "/v1/snapshots", nil, "", req, &out)
	return out, err
}

// ListSnapshots returns every snapshot.
func (c *Client) ListSnapshots(ctx context.Context) ([]apitype.SnapshotInfo, error) {
	var out []apitype.SnapshotInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/snapshots", nil, "", nil, &out)
	return out, err
}

// GetSnapshot returns one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, tag string) (apitype.SnapshotInfo, error) {
	var out apitype.SnapshotInfo
	err := c.call(ctx, 0, http.MethodGet, snapshotPath(tag), nil, "", nil, &out)
	return out, err
}

// DeleteSnapshot deletes a snapshot. The daemon refuses with ErrConflict
// while sandboxes spawned from it, or snapshots branched from those, need
// it.
func (c *Client) DeleteSnapshot(ctx context.Context, tag string) error {
	return c.call(ctx, 0, http.MethodDelete, snapshotPath(tag), nil, "", nil, nil)
}

// Branch checkpoints the running sandbox id into a new snapshot while it
// keeps running and, with req.N > 0, spawns req.N children from it. It
// copies the sandbox's state, so it takes the sandbox's token, as does
// spawning from the new snapshot later. The answer carries the children's
// sandbox tokens, which appear nowhere else.
func (c *Client) Branch(ctx context.Context, id, sandboxToken string, req apitype.BranchRequest) (apitype.BranchResponse, error) {
	var out apitype.BranchResponse
	err := c.call(ctx, SlowTimeout, http.MethodPost, sandboxPath(id, "/branch"), nil, sandboxToken, req, &out)
	return out, err
}

// SnapshotSandbox saves the running sandbox id as the snapshot req.Tag,
// like Branch without children.
func (c *Client) SnapshotSandbox(ctx context.Context, id, sandboxToken string, req apitype.BranchRequest) (apitype.BranchResponse, error) {
	var out apitype.BranchResponse
	err := c.call(ctx, SlowTimeout, http.MethodPost, sandboxPath(id, "/snapshot"), nil, sandboxToken, req, &out)
	return out, err
}

// ListSandboxes returns every sandbox, without sandbox tokens.
func (c *Client) ListSandboxes(ctx context.Context) ([]apitype.SandboxInfo, error) {
	var out []apitype.SandboxInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/sandboxes", nil, "", nil, &out)
	return out, err
}

// GetSandbox returns one sandbox, without its sandbox token.
func (c *Client) GetSandbox(ctx context.Context, id string) (apitype.SandboxInfo, error) {
	var out apitype.SandboxInfo
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, ""), nil, "", nil, &out)
	return out, err
}

// SandboxMetrics reads a sandbox's CPU, memory, disk and pids figures.
func (c *Client) SandboxMetrics(ctx context.Context, id string) (apitype.SandboxMetrics, error) {
	var out apitype.SandboxMetrics
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, "/metrics"), nil, "", nil, &out)
	return out, err
}

// DeleteSandbox destroys a sandbox.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.call(ctx, 0, http.MethodDelete, sandboxPath(id, ""), nil, "", nil, nil)
}

// Extend makes the sandbox expire ttlSecs seconds from now.
func (c *Client) Extend(ctx context.Context, id string, ttlSecs int64) (apitype.SandboxInfo, error) {
	var out apitype.SandboxInfo
	err := c.call(ctx, 0, http.MethodPost, sandboxPath(id, "/extend"), nil, "",
		apitype.ExtendRequest{TTLSecs: ttlSecs}, &out)
	return out, err
}

// Ping checks that the sandbox's agent answers.
func (c *Client) Ping(ctx context.Context, id, sandboxToken string) (apitype.PingResponse, error) {
	var out apitype.PingResponse
	err := c.call(ctx, 0, http.MethodPost, sandboxPath(id, "/ping"), nil, sandboxToken, nil, &out)
	return out, err
}

// Exec runs a command in the sandbox and returns its output and exit code.
// A command that exits non-zero is not an error.
func (c *Client) Exec(ctx context.Context, id, sandboxToken string, req apitype.ExecRequest) (apitype.ExecResponse, error) {
	var out apitype.ExecResponse
	err := c.call(ctx, secs(req.TimeoutSecs), http.MethodPost, sandboxPath(id, "/exec"), nil, sandboxToken, req, &out)
	return out, err
}

// Eval evaluates code in the sandbox's interpreter.
func (c *Client) Eval(ctx context.Context, id, sandboxToken string, req apitype.EvalRequest) (apitype.EvalResponse, error) {
	var out apitype.EvalResponse
	err := c.call(ctx, secs(req.TimeoutSecs), http.MethodPost, sandboxPath(id, "/eval"), nil, sandboxToken, req, &out)
	return out, err
}

// Wait waits until req.Text appears in the file req.Path in the sandbox, or
// req.TimeoutSecs pass.
func (c *Client) Wait(ctx context.Context, id, sandboxToken string, req apitype.WaitRequest) (apitype.WaitResponse, error) {
	var out apitype.WaitResponse
	err := c.call(ctx, secs(req.TimeoutSecs), http.MethodPost, sandboxPath(id, "/wait"), nil, sandboxToken, req, &out)
	return out, err
}

// ListFiles lists path in the sandbox, descending depth levels (0: the
// daemon's default).
func (c *Client) ListFiles(ctx context.Context, id, sandboxToken, path string, depth int) (apitype.ListFilesResponse, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out apitype.ListFilesResponse
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, "/list"), q, sandboxToken, nil, &out)
	return out, err
}

// PutFile writes r to path in the sandbox with the given permission bits,
// creating or replacing the file. The body is streamed as it is read, never
// held in memory. size is r's length if known, else -1; a known size lets
// the daemon refuse an oversized file before any of it is sent. r is not
// closed. Only ctx bounds the call.
func (c *Client) PutFile(ctx context.Context, id, sandboxToken, path string, mode fs.FileMode, r io.Reader, size int64) (apitype.FileInfo, error) {
	return c.PutFileAs(ctx, id, sandboxToken, path, mode, "", r, size)
}

// PutFileAs is PutFile with the file owned by user ("": the sandbox's
// default user).
func (c *Client) PutFileAs(ctx context.Context, id, sandboxToken, path string, mode fs.FileMode, user string, r io.Reader, size int64) (apitype.FileInfo, error) {
	q := url.Values{"path": {path}, "mode": {fmt.Sprintf("%04o", mode.Perm())}}
	if user != "" {
		q.Set("user", user)
	}
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(id, "/files"), q, sandboxToken)
	if err != nil {
		return apitype.FileInfo{}, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if size == 0 {
		// A zero ContentLength with a non-nil Body means "unknown".
		req.Body = http.NoBody
		req.ContentLength = 0
	} else {
		// NopCloser keeps the transport from closing the caller's reader,
		// while still letting it use r's WriterTo.
		req.Body = io.NopCloser(r)
		req.ContentLength = size // -1: chunked
		// Let the daemon refuse (bad sandbox token, no such sandbox, too large)
		// before we send what may be gigabytes.
		req.Header.Set("Expect", "100-continue")
	}
	var out apitype.FileInfo
	if err := c.do(req, &out); err != nil {
		return apitype.FileInfo{}, err
	}
	return out, nil
}

// GetFile opens path in the sandbox for reading. The caller must close the
// returned body, which streams the file to its end as the daemon reads it:
// no length is promised, since procfs files say they are empty and a file
// may change while it is read; a read error means the daemon could not
// finish. The FileInfo has the path asked for, Type "file", Size as the
// file had when opened (X-File-Size; Content-Length, or -1, if the daemon
// sends none), and Mode and MtimeUnix when the daemon sends them. Only ctx
// bounds the call.
func (c *Client) GetFile(ctx context.Context, id, sandboxToken, path string) (io.ReadCloser, apitype.FileInfo, error) {
	return c.GetFileRange(ctx, id, sandboxToken, path, 0, 0)
}

// GetFileRange streams at most length bytes (0: all) of a file, starting at
// offset, as the file was when opened: if it shrinks meanwhile, reading the
// body fails. The FileInfo's Size is the whole file's size.
func (c *Client) GetFileRange(ctx context.Context, id, sandboxToken, path string, offset, length int64) (io.ReadCloser, apitype.FileInfo, error) {
	q := url.Values{"path": {path}}
	if offset != 0 || length != 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
		q.Set("length", strconv.FormatInt(length, 10))
	}
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/files"), q, sandboxToken)
	if err != nil {
		return nil, apitype.FileInfo{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, apitype.FileInfo{}, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, apitype.FileInfo{}, errorFrom(resp)
	}
	fi := apitype.FileInfo{
		Path: path,
		Type: "file",
		Size: resp.ContentLength,
		Mode: resp.Header.Get("X-File-Mode"),
	}
	if n, err := strconv.ParseInt(resp.Header.Get("X-File-Size"), 10, 64); err == nil {
		fi.Size = n
	}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		fi.MtimeUnix = t.Unix()
	}
	return resp.Body, fi, nil
}

// secs converts a request's TimeoutSecs to the extra time its call gets.
func secs(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// sandboxPath is the path of sandbox id's resource suffix.
func sandboxPath(id, suffix string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + suffix
}

// snapshotPath is the path of snapshot tag.
func snapshotPath(tag string) string {
	return "/v1/snapshots/" + url.PathEscape(tag)
}

// call sends a JSON request (body nil: none) and decodes a JSON answer into
// out (nil: discard it). It bounds the call by the Client's timeout plus
// extra, the time the request itself asks the daemon to take. A call the
// daemon refused with a Retry-After (a sandbox it is still checking after
// a restart, a snapshot still being built) is sent again after that long,
// as long as the bound allows, and at most for maxRetryFor.
func (c *Client) call(ctx context.Context, extra time.Duration, method, path string, q url.Values, sandboxToken string, body, out any) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+extra)
		defer cancel()
	}
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fmt.Errorf("cove: encode %s %s: %w", method, path, err)
		}
	}
	return retry(ctx, func() error {
		req, err := c.newRequest(ctx, method, path, q, sandboxToken)
		if err != nil {
			return err
		}
		if body != nil {
			setJSONBody(req, b)
		}
		return c.do(req, out)
	})
}

// setJSONBody makes b req's body.
func setJSONBody(req *http.Request, b []byte) {
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	req.Header.Set("Content-Type", "application/json")
}

// retry runs attempt until it succeeds or fails with no Retry-After, or
// waiting for one would pass ctx's deadline or maxRetryFor.
func retry(ctx context.Context, attempt func() error) error {
	for giveUp := time.Now().Add(maxRetryFor); ; {
		err := attempt()
		var e *Error
		if !errors.As(err, &e) || e.RetryAfter <= 0 || time.Now().Add(e.RetryAfter).After(giveUp) {
			return err
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < e.RetryAfter {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(e.RetryAfter):
		}
	}
}

// maxRetryFor bounds how long call keeps sending a call the daemon asks
// to be sent again later.
const maxRetryFor = 2 * time.Minute

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, sandboxToken string) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("cove: %w", err)
	}
	if c.apiKey != "" && path != "/healthz" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if sandboxToken != "" {
		req.Header.Set(apitype.SandboxTokenHeader, sandboxToken)
	}
	req.Header.Set("Accept", "application/json")
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	return req, nil
}

// do sends req and decodes a 2xx JSON answer into out, or turns any other
// status into an *Error.
func (c *Client) do(req *http.Request, out any) error {
	resp, err := c.hc.Do(req)
	if err != nil {
		return err // a *url.Error naming the method and URL
	}
	defer func() {
		// Drain a little so the connection can be reused.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("cove: decode %s %s answer: %w", req.Method, req.URL.Path, err)
	}
	return nil
}
