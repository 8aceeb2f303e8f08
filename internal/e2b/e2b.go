// Package e2b is E2B's control plane (the REST API its SDK calls with
// E2B_API_URL) as a facade over cove's own public API: every call goes
// through pkg/client to the daemon on loopback with the caller's own API
// key (X-API-KEY, "e2b_" + a cove key), so tenancy, quotas, audit and
// metrics hold as for any other client. It never talks to an agent, and
// keeps no state but template builds in flight (templates.go): a
// sandbox's token comes from the daemon (GET /v1/sandboxes/{id}/token)
// each time connect needs it.
package e2b

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Labels under which the facade keeps what E2B has and cove's sandboxes
// do not: the template asked for, and the metadata (each key prefixed).
const (
	labelTemplate = "e2b.template"
	metaPrefix    = "e2b.meta."
	metaHexPrefix = "e2b.metax."
)

// DefaultUser is the account E2B's sandboxes run as when a call names
// none (as E2B's base template does; cove's own default is root), in its
// home, DefaultCwd.
const (
	DefaultUser = "user"
	DefaultCwd  = "/home/user"
)

// DefaultTemplate is E2B's default template name, served by cove's
// default snapshot.
const DefaultTemplate = "base"

// Config configures the facade.
type Config struct {
	// API is a client of the daemon's API (loopback); each request uses
	// it with the caller's key (client.WithAPIKey).
	API *client.Client
	// EnvdVersion is what the create and connect answers report (the
	// envd facade's envd.EnvdVersion).
	EnvdVersion string
	// Domain is the create answer's "domain": getHost(port) is
	// PORT-ID.<Domain> ("" leaves the SDK's E2B_DOMAIN).
	Domain string
	// DefaultSnapshot serves template "base" ("": cove's default image).
	DefaultSnapshot string
	// ClientID is the create answer's clientID.
	ClientID string
	// User and Cwd are a new sandbox's default account and directory
	// (DefaultUser, DefaultCwd for E2B's; "": the image's).
	User, Cwd string
	Logger    *slog.Logger
}

// Handler serves E2B's control plane.
type Handler struct {
	cfg  Config
	mux  *http.ServeMux
	tmpl *templates // builds in flight (templates.go)
}

// New returns the control plane's handler.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "cove"
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), tmpl: newTemplates()}
	m := h.mux
	h.templateRoutes(m)
	m.HandleFunc("POST /sandboxes", h.create)
	m.HandleFunc("POST /v2/sandboxes", h.create)
	m.HandleFunc("GET /sandboxes", h.listV1)
	m.HandleFunc("GET /v2/sandboxes", h.list)
	m.HandleFunc("GET /sandboxes/{id}", h.get)
	m.HandleFunc("DELETE /sandboxes/{id}", h.kill)
	m.HandleFunc("POST /sandboxes/{id}/connect", h.connect)
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", h.connect)
	m.HandleFunc("POST /sandboxes/{id}/resume", h.connect)
	m.HandleFunc("POST /sandboxes/{id}/timeout", h.timeout)
	m.HandleFunc("POST /sandboxes/{id}/pause", h.pause)
	m.HandleFunc("POST /sandboxes/{id}/fork", h.fork)
	m.HandleFunc("POST /sandboxes/{id}/snapshots", h.snapshot)
	m.HandleFunc("GET /snapshots", h.listSnapshots)
	m.HandleFunc("GET /sandboxes/{id}/metrics", h.metrics)
	m.HandleFunc("PUT /sandboxes/{id}/network", h.network)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("%s %s is not served by cove's E2B facade (see docs/E2B.md)", r.Method, r.URL.Path))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, uploadPrefix) {
		h.upload(w, r) // signed: the SDK sends no key with it
		return
	}
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		writeErr(w, http.StatusUnauthorized, "missing X-API-KEY (set E2B_API_KEY to a cove API key)")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), keyCtx{}, key))
	h.mux.ServeHTTP(w, r)
}

type keyCtx struct{}

// api is the daemon's client acting with the caller's key.
func (h *Handler) api(r *http.Request) *client.Client {
	k, _ := r.Context().Value(keyCtx{}).(string)
	return h.cfg.API.WithAPIKey(k)
}

// errorBody is E2B's error shape: the SDK reads code to tell 404 and 409
// apart.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// fail answers the daemon's error with its status in E2B's shape.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ce *client.Error
	if errors.As(err, &ce) {
		if ce.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((ce.RetryAfter+time.Second-1)/time.Second)))
		}
		writeErr(w, ce.Status, ce.Message)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	h.cfg.Logger.ErrorContext(r.Context(), "e2b: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeErr(w, http.StatusBadGateway, "cove daemon: "+err.Error())
}

// decode reads an optional JSON body, tolerating fields the facade does
// not serve (the SDK sends many).
func decode(r *http.Request, v any) error {
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func (h *Handler) badRequest(w http.ResponseWriter, err error) {
	writeErr(w, http.StatusBadRequest, "bad request body: "+err.Error())
}

// createRequest is E2B's NewSandbox, the fields cove serves.
type createRequest struct {
	TemplateID string            `json:"templateID"`
	Timeout    int64             `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	AutoPause  *bool             `json:"autoPause"`
	AutoResume *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Secure              *bool `json:"secure"`
	AllowInternetAccess *bool `json:"allow_internet_access"`
	Network             *struct {
		AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	} `json:"network"`
}

// sandboxResponse is E2B's Sandbox (create, connect, fork children).
type sandboxResponse struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	Alias              string  `json:"alias,omitempty"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	tmpl := req.TemplateID
	if tmpl == "" {
		tmpl = DefaultTemplate
	}
	labels := map[string]string{labelTemplate: tmpl}
	for k, v := range req.Metadata {
		labels[metaLabel(k)] = v
	}
	// E2B's ports are public unless network.allowPublicTraffic is false.
	if req.Network == nil || req.Network.AllowPublicTraffic == nil || *req.Network.AllowPublicTraffic {
		labels[apitype.LabelPublicPorts] = "true"
	}
	creq := apitype.CreateSandboxRequest{TTLSecs: req.Timeout, Labels: labels, Env: req.EnvVars,
		User: h.cfg.User, Cwd: h.cfg.Cwd}
	if tmpl == DefaultTemplate {
		creq.SnapshotTag = h.cfg.DefaultSnapshot
	} else {
		creq.SnapshotTag = tmpl // cove templates are snapshots of their name
	}
	if req.AutoPause != nil && *req.AutoPause {
		creq.OnExpiry = "pause"
	}
	if req.AutoResume != nil {
		creq.AutoResume = req.AutoResume.Enabled
	}
	out, err := h.api(r).CreateSandboxes(r.Context(), creq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(out) != 1 {
		writeErr(w, http.StatusBadGateway, fmt.Sprintf("cove daemon made %d sandboxes, want 1", len(out)))
		return
	}
	writeJSON(w, http.StatusCreated, h.sandbox(out[0], out[0].Token))
}

func (h *Handler) sandbox(info apitype.SandboxInfo, token string) sandboxResponse {
	out := sandboxResponse{SandboxID: info.ID, TemplateID: templateOf(info), ClientID: h.cfg.ClientID,
		EnvdVersion: h.cfg.EnvdVersion, EnvdAccessToken: token}
	if h.cfg.Domain != "" {
		d := h.cfg.Domain
		out.Domain = &d
	}
	return out
}

func templateOf(info apitype.SandboxInfo) string {
	if t := info.Labels[labelTemplate]; t != "" {
		return t
	}
	if info.SnapshotTag != "" {
		return info.SnapshotTag
	}
	return DefaultTemplate
}

// metaLabel is the cove label that keeps metadata key k: cove's label
// keys are lower-case letters, digits and . _ / -, so any other key is
// kept hex-encoded under metaHexPrefix.
func metaLabel(k string) string {
	if k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789._/-") == "" {
		return metaPrefix + k
	}
	return metaHexPrefix + hex.EncodeToString([]byte(k))
}

func metadataOf(info apitype.SandboxInfo) map[string]string {
	md := map[string]string{}
	for k, v := range info.Labels {
		if rest, ok := strings.CutPrefix(k, metaHexPrefix); ok {
			if raw, err := hex.DecodeString(rest); err == nil {
				md[string(raw)] = v
			}
		} else if rest, ok := strings.CutPrefix(k, metaPrefix); ok {
			md[rest] = v
		}
	}
	return md
}

// state is E2B's sandbox state for cove's status.
func state(status string) string {
	switch status {
	case apitype.StatusPaused, apitype.StatusPausing:
		return "paused"
	}
	return "running"
}

// detail is E2B's SandboxDetail / ListedSandbox.
type detail struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	ClientID        string            `json:"clientID"`
	Alias           string            `json:"alias,omitempty"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
}

func (h *Handler) detail(info apitype.SandboxInfo) detail {
	d := detail{SandboxID: info.ID, TemplateID: templateOf(info), ClientID: h.cfg.ClientID,
		StartedAt: time.Unix(info.CreatedAtUnix, 0).UTC(), EndAt: time.Unix(info.ExpiresAtUnix, 0).UTC(),
		CPUCount: info.CPUs, MemoryMB: info.MemoryMiB, DiskSizeMB: info.DiskMiB, Metadata: metadataOf(info),
		State: state(info.Status), EnvdVersion: h.cfg.EnvdVersion}
	if info.Status == apitype.StatusPaused && info.RemainingTTLSecs > 0 {
		d.EndAt = time.Now().Add(time.Duration(info.RemainingTTLSecs) * time.Second).UTC()
	}
	if h.cfg.Domain != "" {
		dm := h.cfg.Domain
		d.Domain = &dm
	}
	return d
}

// live reports whether a sandbox is one E2B would show: dead ones are
// gone for the SDK.
func live(info apitype.SandboxInfo) bool {
	return info.Status != apitype.StatusDead && info.Status != apitype.StatusStopping
}

// lookupWithToken is lookup, with the caller's client and the sandbox's
// token, which only a key allowed to see tokens gets (else a failure).
func (h *Handler) lookupWithToken(w http.ResponseWriter, r *http.Request) (*client.Client, apitype.SandboxInfo, string, bool) {
	info, ok := h.lookup(w, r)
	if !ok {
		return nil, info, "", false
	}
	api := h.api(r)
	tok, err := api.SandboxToken(r.Context(), info.ID)
	if err != nil {
		h.fail(w, r, err)
		return nil, info, "", false
	}
	return api, info, tok, true
}

func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) (apitype.SandboxInfo, bool) {
	id := r.PathValue("id")
	info, err := h.api(r).GetSandbox(r.Context(), id)
	if err == nil && !live(info) {
		err = &client.Error{Status: http.StatusNotFound, Code: apitype.CodeNotFound, Message: fmt.Sprintf("sandbox %q not found (%s)", id, info.DeadReason)}
	}
	if err != nil {
		h.fail(w, r, err)
		return info, false
	}
	return info, true
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	info, ok := h.lookup(w, r)
	if !ok {
		return
	}
	d := h.detail(info)
	// The token only for a key allowed to see tokens: a 403 from the
	// daemon leaves it out rather than failing the call.
	if tok, err := h.api(r).SandboxToken(r.Context(), info.ID); err == nil {
		d.EnvdAccessToken = tok
	}
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.lookup(w, r); !ok {
		return
	}
	if err := h.api(r).DeleteSandbox(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect resumes a paused sandbox (with the timeout asked, if any) or
// extends a running one, and hands out its token: only to a key that may
// see tokens, which the daemon decides.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout int64 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	api, info, tok, ok := h.lookupWithToken(w, r)
	if !ok {
		return
	}
	status, err := http.StatusOK, error(nil)
	switch info.Status {
	case apitype.StatusPaused, apitype.StatusPausing:
		info, err = api.ResumeSandbox(r.Context(), info.ID, req.Timeout)
		status = http.StatusCreated
	default:
		// E2B's connect never shortens a running sandbox's life.
		if req.Timeout > 0 && time.Until(time.Unix(info.ExpiresAtUnix, 0)) < time.Duration(req.Timeout)*time.Second {
			info, err = api.Extend(r.Context(), info.ID, req.Timeout)
		}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, status, h.sandbox(info, tok))
}

func (h *Handler) timeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout int64 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	if req.Timeout <= 0 {
		writeErr(w, http.StatusBadRequest, "timeout: want seconds > 0")
		return
	}
	if _, ok := h.lookup(w, r); !ok {
		return
	}
	if _, err := h.api(r).Extend(r.Context(), r.PathValue("id"), req.Timeout); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	info, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if state(info.Status) == "paused" {
		writeErr(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already paused", info.ID))
		return
	}
	if _, err := h.api(r).PauseSandbox(r.Context(), info.ID); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork makes count children of a running sandbox with cove's branch; the
// answer is per child, as E2B's is.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count   int   `json:"count"`
		Timeout int64 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	if req.Count <= 0 {
		req.Count = 1
	}
	api, info, tok, ok := h.lookupWithToken(w, r)
	if !ok {
		return
	}
	br, err := api.Branch(r.Context(), info.ID, tok, apitype.BranchRequest{N: req.Count, TTLSecs: req.Timeout})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	type result struct {
		Sandbox *sandboxResponse `json:"sandbox,omitempty"`
		Error   *errorBody       `json:"error,omitempty"`
	}
	out := make([]result, 0, len(br.Children))
	for _, c := range br.Children {
		// Children carry their source's labels (template, metadata).
		if c.Labels == nil {
			c.Labels = info.Labels
		}
		sb := h.sandbox(c, c.Token)
		out = append(out, result{Sandbox: &sb})
	}
	writeJSON(w, http.StatusOK, out)
}

// snapshot saves a sandbox as a cove snapshot (its branch, with no
// children); snapshotID is the snapshot's tag, which create's templateID
// takes.
func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	api, info, tok, ok := h.lookupWithToken(w, r)
	if !ok {
		return
	}
	br, err := api.SnapshotSandbox(r.Context(), info.ID, tok, apitype.BranchRequest{Tag: req.Name})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo{SnapshotID: br.Tag, Names: []string{br.Tag}})
}

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	all, err := h.api(r).ListSnapshots(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	sbID, name := q.Get("sandboxID"), q.Get("name")
	out := []snapshotInfo{}
	for _, sn := range all {
		if sn.BranchedFrom == "" || (sbID != "" && sn.BranchedFrom != sbID) || (name != "" && sn.Tag != name) {
			continue
		}
		out = append(out, snapshotInfo{SnapshotID: sn.Tag, Names: []string{sn.Tag}})
	}
	page(w, r, out, func(s snapshotInfo) string { return s.SnapshotID })
}

// listV1 is the SDK before 2.x's list: every running sandbox.
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request) {
	all, err := h.api(r).ListSandboxes(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := []detail{}
	for _, info := range all {
		if live(info) && state(info.Status) == "running" {
			out = append(out, h.detail(info))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// list is GET /v2/sandboxes: metadata ("k=v&..."), state
// ("running,paused"), limit and nextToken (the id to start after; the next
// page's in X-Next-Token).
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var want map[string]string
	if md := q.Get("metadata"); md != "" {
		vals, err := url.ParseQuery(md)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "metadata: want an encoded k=v&... string: "+err.Error())
			return
		}
		want = make(map[string]string, len(vals))
		for k, v := range vals {
			want[metaLabel(k)] = v[0]
		}
	}
	states := []string{"running", "paused"}
	if s := q.Get("state"); s != "" {
		states = strings.Split(s, ",")
	}
	all, err := h.api(r).ListSandboxesLabeled(r.Context(), want)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := []detail{}
	for _, info := range all {
		if !live(info) || !slices.Contains(states, state(info.Status)) {
			continue
		}
		out = append(out, h.detail(info))
	}
	page(w, r, out, func(d detail) string { return d.SandboxID })
}

// page writes the part of items (sorted by id) after nextToken, at most
// limit, with X-Next-Token when more follow.
func page[T any](w http.ResponseWriter, r *http.Request, items []T, id func(T) string) {
	q := r.URL.Query()
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			writeErr(w, http.StatusBadRequest, "limit: want a positive integer")
			return
		}
		limit = min(n, 1000)
	}
	sort.Slice(items, func(i, j int) bool { return id(items[i]) < id(items[j]) })
	if after := q.Get("nextToken"); after != "" {
		i := sort.Search(len(items), func(i int) bool { return id(items[i]) > after })
		items = items[i:]
	}
	if len(items) > limit {
		items = items[:limit]
		w.Header().Set("X-Next-Token", id(items[limit-1]))
	}
	writeJSON(w, http.StatusOK, items)
}

// metric is E2B's SandboxMetric.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// metrics answers with one sample, now: cove keeps no history of a
// sandbox's usage, so start and end only bound whether now is in range.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	info, ok := h.lookup(w, r)
	if !ok {
		return
	}
	m, err := h.api(r).SandboxMetrics(r.Context(), info.ID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	now := time.Now().UTC()
	q := r.URL.Query()
	if end, err := strconv.ParseInt(q.Get("end"), 10, 64); err == nil && now.Unix() > end+1 {
		writeJSON(w, http.StatusOK, []metric{})
		return
	}
	cpuPct := 0.0
	if up := time.Since(time.Unix(info.CreatedAtUnix, 0)).Seconds(); info.CPUs > 0 && up > 0 {
		cpuPct = 100 * m.CPUSeconds / (up * float64(info.CPUs))
	}
	writeJSON(w, http.StatusOK, []metric{{Timestamp: now, TimestampUnix: now.Unix(), CPUCount: info.CPUs,
		CPUUsedPct: cpuPct, MemUsed: m.MemoryBytes, MemTotal: m.MemoryLimitBytes,
		DiskUsed: m.DiskWrittenBytes, DiskTotal: int64(info.DiskMiB) << 20}})
}

// network maps E2B's allowOut/denyOut onto cove's policy: CIDRs and
// domain names alike.
func (h *Handler) network(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AllowOut []string `json:"allowOut"`
		DenyOut  []string `json:"denyOut"`
	}
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	if _, ok := h.lookup(w, r); !ok {
		return
	}
	var p apitype.NetworkPolicy
	for _, a := range req.AllowOut {
		if isCIDR(a) {
			p.AllowCIDRs = append(p.AllowCIDRs, a)
		} else {
			p.AllowDomains = append(p.AllowDomains, a)
		}
	}
	for _, d := range req.DenyOut {
		if isCIDR(d) {
			p.DenyCIDRs = append(p.DenyCIDRs, d)
		} else {
			p.DenyDomains = append(p.DenyDomains, d)
		}
	}
	if _, err := h.api(r).SetNetwork(r.Context(), r.PathValue("id"), p); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func isCIDR(s string) bool {
	return strings.ContainsAny(s, "/:") || strings.Trim(s, "0123456789.") == ""
}
