// Package apitype holds the JSON shapes of cove's REST API, shared by the
// daemon and pkg/client. Field names follow forkd's v1 API where it has one.
package apitype

// Header names.
const (
	// SandboxTokenHeader carries a sandbox's own token on data-plane calls.
	SandboxTokenHeader = "X-Sandbox-Token"
	// SandboxTokenHeaderAlt is forkd's name for the same header.
	SandboxTokenHeaderAlt = "X-Sandstorm-Sandbox-Token"
)

// Sandbox statuses.
const (
	StatusCreating = "creating"
	StatusRunning  = "running"
	StatusStopping = "stopping"
	StatusPooled   = "pooled" // restored and waiting in a warm pool; never listed
	// StatusDead is a sandbox whose runtime process ended while it ran:
	// SandboxInfo.DeadReason says why. It answers data-plane calls with
	// 410 and stays listed a while (cove serve --dead-keep).
	StatusDead = "dead"
)

// Why a sandbox is dead (SandboxInfo.DeadReason).
const (
	// DeadExited: its runtime process (runsc's sandbox, the VM's QEMU)
	// exited: the sandbox's init ended (kill -9 1 under gVisor; a guest
	// kernel's panic under QEMU), or the process was killed.
	DeadExited = "exited"
	// DeadOOMKilled: the host's OOM killer ended it at its memory limit.
	DeadOOMKilled = "oom_killed"
	// DeadUnreachable: after a daemon restart its agent did not answer.
	DeadUnreachable = "unreachable"
)

// ErrorBody is every error response: {"error": "...", "code": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
	// RequestID is the X-Request-Id of the failed request, as the
	// daemon's logs and audit log name it.
	RequestID string `json:"request_id,omitempty"`
}

// Error codes carried in ErrorBody.Code.
const (
	CodeBadRequest   = "bad_request"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeTooLarge     = "too_large"
	CodeTimeout      = "timeout"
	CodeUnavailable  = "unavailable"
	CodeInternal     = "internal"
	CodeLimit        = "limit_reached"
	CodeGone         = "gone" // 410: the sandbox is dead
	// CodeBadGateway (502): nothing answered on the sandbox's port.
	CodeBadGateway = "bad_gateway"
	// CodeNoSpace (507): the daemon's disk is full; nothing was saved.
	CodeNoSpace = "insufficient_storage"
	// CodeQuota (429): the call would take the key's tenant past one of
	// its quotas, which the message names with its value; nothing was made.
	CodeQuota = "quota_exceeded"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	SnapshotTag string `json:"snapshot_tag,omitempty"` // empty: cold start from Image
	Image       string `json:"image,omitempty"`        // empty: the default image
	N           int    `json:"n,omitempty"`            // 0 means 1; at most MaxN
	TTLSecs     int64  `json:"ttl_secs,omitempty"`     // 0: the configured default
	CPUs        int    `json:"cpus,omitempty"`         // 0: the configured default
	MemoryMiB   int    `json:"memory_mib,omitempty"`   // 0: the configured default
	DiskMiB     int    `json:"disk_mib,omitempty"`     // disk space it may write; 0: the configured default
	Pids        int    `json:"pids,omitempty"`         // most processes and threads; 0: the configured default
	// Network is the sandboxes' egress policy. nil: a spawn's children
	// take their snapshot's, a cold start gets none (deny all).
	Network *NetworkPolicy `json:"network,omitempty"`
	// Prewarm is forkd's flag, accepted for compatibility: every spawn
	// refills the snapshot's warm pool in the background anyway.
	Prewarm bool `json:"prewarm,omitempty"`
	// Labels are the sandboxes' labels; nil: a spawn's children take their
	// snapshot's. User is the account exec and file calls run and write as
	// when they name none ("root" or "user"); "": the snapshot's, else root.
	Labels map[string]string `json:"labels,omitempty"`
	User   string            `json:"user,omitempty"`
	// Env and Cwd are the environment and working directory every process
	// started in the sandboxes gets (a call's own env comes on top, its cwd
	// instead); nil and "": a spawn's children take their snapshot's. Cwd
	// must be a directory in the sandbox.
	Env map[string]string `json:"env,omitempty"`
	Cwd string            `json:"cwd,omitempty"`
	// AutoResume: a data-plane call to the sandbox while it is paused
	// resumes it first. OnExpiry (OnExpiryKill, the default, or
	// OnExpiryPause) is what happens when its lifetime ends.
	AutoResume bool   `json:"auto_resume,omitempty"`
	OnExpiry   string `json:"on_expiry,omitempty"`
	// SandboxToken is no part of the body: pkg/client sends it in the
	// SandboxTokenHeader. A snapshot saved from a sandbox (by branch or
	// snapshot) holds its state, so spawning from it takes that sandbox's
	// token; a snapshot built from an image takes none.
	SandboxToken string `json:"-"`
}

// MaxN bounds how many sandboxes one create call makes.
const MaxN = 1000

// LabelPublicPorts, set to "true" on a sandbox, makes every port of it
// reachable through preview URLs without a token, as E2B's sandboxes are
// (allowPublicTraffic): the E2B facade sets it, since E2B's getHost
// exposes nothing first. A port exposed with a token keeps its token.
const LabelPublicPorts = "cove.public-ports"

// SandboxInfo describes a sandbox. Token is set only in the response that
// created the sandbox, never by GET or LIST.
type SandboxInfo struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	Backend       string `json:"backend"`
	Image         string `json:"image"`
	SnapshotTag   string `json:"snapshot_tag,omitempty"`
	CPUs          int    `json:"cpus"`
	MemoryMiB     int    `json:"memory_mib"`
	DiskMiB       int    `json:"disk_mib"`
	Pids          int    `json:"pids"`
	CreatedAtUnix int64  `json:"created_at_unix"`
	ExpiresAtUnix int64  `json:"expires_at_unix"`
	Token         string `json:"token,omitempty"`
	// DeadReason (DeadExited, ...) and DiedAtUnix are set for a dead
	// sandbox only.
	DeadReason string `json:"dead_reason,omitempty"`
	DiedAtUnix int64  `json:"died_at_unix,omitempty"`
	// Network is its egress policy ({} denies everything).
	Network NetworkPolicy `json:"network"`
	// Ports are its exposed ports, without their tokens: GET
	// /v1/sandboxes/{id}/ports, which takes the sandbox token, shows those.
	Ports []PortInfo `json:"ports,omitempty"`
	// Labels are its labels; User its default user (absent: root); Env
	// and Cwd what its processes get by default.
	Labels map[string]string `json:"labels,omitempty"`
	User   string            `json:"user,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
	// AutoResume and OnExpiry are as created. A paused sandbox has
	// PausedAtUnix and RemainingTTLSecs (its lifetime stands still while
	// it is paused; ExpiresAtUnix then moves with the clock).
	AutoResume       bool   `json:"auto_resume,omitempty"`
	OnExpiry         string `json:"on_expiry,omitempty"`
	PausedAtUnix     int64  `json:"paused_at_unix,omitempty"`
	RemainingTTLSecs int64  `json:"remaining_ttl_secs,omitempty"`
	// PausedBytes is the disk a paused sandbox's saved state takes;
	// CheckpointBytes that of its checkpoints; DiskBytes both.
	PausedBytes     int64 `json:"paused_bytes,omitempty"`
	CheckpointBytes int64 `json:"checkpoint_bytes,omitempty"`
	DiskBytes       int64 `json:"disk_bytes,omitempty"`
}

// NetworkPolicy is a sandbox's egress policy: what it may connect to. The
// zero policy, every list empty, denies everything. A destination must be
// allowed (by CIDR, or by a name in AllowDomains it was resolved or asked
// for by) and not denied; some (the host, other sandboxes, link-local and
// private ranges unless allowed by CIDR) stay denied whatever it says.
type NetworkPolicy struct {
	AllowCIDRs []string `json:"allow_cidrs,omitempty"` // "203.0.113.0/24", "198.51.100.7"
	DenyCIDRs  []string `json:"deny_cidrs,omitempty"`
	// AllowDomains are names it may resolve and reach: "example.org", or
	// "*.example.org" for every name below it. HTTP and HTTPS are judged
	// by the Host header and the TLS SNI.
	AllowDomains []string `json:"allow_domains,omitempty"`
	DenyDomains  []string `json:"deny_domains,omitempty"`
	// Presets name policies in the daemon's configuration (GET /v1/info
	// lists them), such as "pypi", added to this one.
	Presets []string `json:"presets,omitempty"`
}

// IsZero reports whether p denies everything.
func (p NetworkPolicy) IsZero() bool {
	return len(p.AllowCIDRs) == 0 && len(p.DenyCIDRs) == 0 && len(p.AllowDomains) == 0 &&
		len(p.DenyDomains) == 0 && len(p.Presets) == 0
}

// ExposePortRequest is the body of POST /v1/sandboxes/{id}/ports.
type ExposePortRequest struct {
	Port   int  `json:"port"`             // 1-65535, where a server in the sandbox listens on 0.0.0.0
	Public bool `json:"public,omitempty"` // reachable without the port's token
}

// PortInfo is an exposed port: the preview URLs the daemon serves it at,
// and the token they take unless it is public (in the X-Cove-Preview-Token
// header, or once as ?token= in a browser, which then keeps a cookie).
type PortInfo struct {
	Port     int    `json:"port"`
	Public   bool   `json:"public"`
	URL      string `json:"url"`
	HTTPSURL string `json:"https_url,omitempty"`
	Token    string `json:"token,omitempty"`
}

// PortsResponse answers GET /v1/sandboxes/{id}/ports.
type PortsResponse struct {
	Ports []PortInfo `json:"ports"`
}

// CompatCreateResponse is sandboxd's POST /sandboxes answer.
type CompatCreateResponse struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec. It accepts
// forkd's "args" and sandboxd's "cmd" (both argv), or "shell", a string run
// by /bin/sh -c.
type ExecRequest struct {
	Args        []string          `json:"args,omitempty"`
	Cmd         []string          `json:"cmd,omitempty"`
	Shell       string            `json:"shell,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Stdin       string            `json:"stdin,omitempty"`
	TimeoutSecs float64           `json:"timeout_secs,omitempty"`
	User        string            `json:"user,omitempty"` // "": the sandbox's default user
	// Background starts the command as a background process and answers
	// at once (201) with its ProcessInfo; Tag names it (unique among running
	// ones), OutputLimit is the bytes of output it keeps (0: the default).
	Background  bool   `json:"background,omitempty"`
	Tag         string `json:"tag,omitempty"`
	OutputLimit int64  `json:"output_limit,omitempty"`
}

// ExecResponse is the result of an exec.
type ExecResponse struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	DurationMs int64  `json:"duration_ms"`
}

// EvalRequest is the body of POST /v1/sandboxes/{id}/eval.
type EvalRequest struct {
	Code        string  `json:"code"`
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
}

// EvalResponse is forkd's eval answer, plus captured output.
type EvalResponse struct {
	Result   string `json:"result"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// PingResponse answers POST /v1/sandboxes/{id}/ping.
type PingResponse struct {
	OK        bool   `json:"ok"`
	Hostname  string `json:"hostname"`
	UptimeMs  int64  `json:"uptime_ms"`
	LatencyUs int64  `json:"latency_us"`
}

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Path      string `json:"path"`
	Type      string `json:"type"` // file, dir, symlink, other
	Size      int64  `json:"size"`
	Mode      string `json:"mode"` // octal permission bits, e.g. "0644"
	MtimeUnix int64  `json:"mtime_unix"`
	Target    string `json:"target,omitempty"`
	// SHA256 is the hex digest of the content a PUT wrote, hashed as it
	// streamed; absent from other answers.
	SHA256 string `json:"sha256,omitempty"`
}

// ListFilesResponse answers GET /v1/sandboxes/{id}/list.
type ListFilesResponse struct {
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

// WaitRequest is the body of POST /v1/sandboxes/{id}/wait.
type WaitRequest struct {
	Path        string  `json:"path"`
	Text        string  `json:"text"`
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
}

// WaitResponse reports whether the text appeared in time.
type WaitResponse struct {
	Found     bool  `json:"found"`
	ElapsedMs int64 `json:"elapsed_ms"`
}

// ExtendRequest is the body of POST /v1/sandboxes/{id}/extend: the sandbox
// then expires TTLSecs from now.
type ExtendRequest struct {
	TTLSecs int64 `json:"ttl_secs"`
}

// Info answers GET /v1/info: what the daemon runs on and its limits.
type Info struct {
	Version       string `json:"version"`
	Backend       string `json:"backend"`
	BackendReason string `json:"backend_reason"`
	RuntimeVer    string `json:"runtime_version"`
	DefaultImage  string `json:"default_image"`
	Limits        Limits `json:"limits"`
	Sandboxes     int    `json:"sandboxes"`
	// Accel is QEMU's accelerator, "kvm" or "tcg"; empty for gVisor.
	Accel string `json:"accel,omitempty"`
	// Recovering is how many recorded sandboxes a restarted daemon is
	// still checking or cleaning up.
	Recovering int         `json:"recovering,omitempty"`
	Network    NetworkInfo `json:"network"`
}

// NetworkInfo is what the daemon offers sandboxes for a network.
type NetworkInfo struct {
	// Enabled: sandboxes have a network, its egress denied unless a
	// sandbox's policy allows it. False: they have none at all.
	Enabled bool `json:"enabled"`
	// Presets are the policies a NetworkPolicy may name.
	Presets []string `json:"presets,omitempty"`
	// PreviewDomain is where exposed ports are served: PORT-ID.<domain>.
	PreviewDomain string `json:"preview_domain,omitempty"`
	// PreviewHTTPSPort, if not zero, serves them over HTTPS too.
	PreviewHTTPSPort int `json:"preview_https_port,omitempty"`
	// PreviewCA is the certificate to trust for HTTPS preview URLs, when
	// cove issued theirs from its local CA.
	PreviewCA string `json:"preview_ca,omitempty"`
}

// Limits are the bounds a request must stay within.
type Limits struct {
	DefaultTTLSecs   int64 `json:"default_ttl_secs"`
	MaxTTLSecs       int64 `json:"max_ttl_secs"`
	DefaultCPUs      int   `json:"default_cpus"`
	MaxCPUs          int   `json:"max_cpus"`
	DefaultMemoryMiB int   `json:"default_memory_mib"`
	MaxMemoryMiB     int   `json:"max_memory_mib"`
	MaxSandboxes     int   `json:"max_sandboxes"`
	MaxN             int   `json:"max_n"`
	DefaultDiskMiB   int   `json:"default_disk_mib"`
	MaxDiskMiB       int   `json:"max_disk_mib"`
	DefaultPids      int   `json:"default_pids"`
	MaxPids          int   `json:"max_pids"`
	// OpenFiles is how many files each process in a sandbox may have open.
	OpenFiles int `json:"open_files"`
	// MemoryBudgetMiB bounds the memory limits of all sandboxes together,
	// warm pools included: a create past it is refused.
	MemoryBudgetMiB int `json:"memory_budget_mib"`
}

// VersionResponse answers GET /version.
type VersionResponse struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
}

// CreateSnapshotRequest is the body of POST /v1/snapshots: boot a sandbox
// from Image, run Warm in it, warm the eval interpreter, and save it all as
// a template that sandboxes can be spawned from.
type CreateSnapshotRequest struct {
	Tag       string `json:"tag"`
	Image     string `json:"image,omitempty"`      // empty: the default image
	Warm      string `json:"warm,omitempty"`       // shell command; empty: import common Python modules
	CPUs      int    `json:"cpus,omitempty"`       // 0: the configured default
	MemoryMiB int    `json:"memory_mib,omitempty"` // 0: the configured default
	DiskMiB   int    `json:"disk_mib,omitempty"`   // 0: the configured default
	Pids      int    `json:"pids,omitempty"`       // 0: the configured default
	PoolSize  *int   `json:"pool_size,omitempty"`  // ready sandboxes kept restored; nil: the daemon's default
	// Network is the builder's egress policy while Warm runs, recorded on
	// the snapshot for its children; nil: none (deny all).
	Network *NetworkPolicy `json:"network,omitempty"`
}

// ContentTypeNDJSON is newline-delimited JSON: POST /v1/snapshots answers
// with it, one SnapshotBuildEvent a line, when the request accepts it.
const ContentTypeNDJSON = "application/x-ndjson"

// SnapshotBuildEvent is one line of a streamed snapshot build: output of
// the warm command as it runs, then the snapshot or the error that ended
// the build.
type SnapshotBuildEvent struct {
	Output   string        `json:"output,omitempty"`
	Snapshot *SnapshotInfo `json:"snapshot,omitempty"`
	Error    *ErrorBody    `json:"error,omitempty"`
}

// SnapshotInfo describes a snapshot (forkd's shape, extended).
type SnapshotInfo struct {
	Tag           string `json:"tag"`
	CreatedAtUnix int64  `json:"created_at_unix"`
	BranchedFrom  string `json:"branched_from,omitempty"` // the sandbox it was branched from
	Parent        string `json:"parent,omitempty"`        // the snapshot that sandbox was spawned from
	Depth         int    `json:"depth"`                   // 0 for a built snapshot, parent's + 1 for a branch
	Backend       string `json:"backend"`
	Image         string `json:"image"`
	CPUs          int    `json:"cpus"`
	MemoryMiB     int    `json:"memory_mib"`
	DiskMiB       int    `json:"disk_mib"`
	Pids          int    `json:"pids"`
	SizeBytes     int64  `json:"size_bytes"` // on disk
	PoolSize      int    `json:"pool_size"`
	PoolReady     int    `json:"pool_ready"`
	Children      int    `json:"children"` // live sandboxes spawned from it
	// RuntimeVersion is the backend version that saved it; only that
	// version can restore it.
	RuntimeVersion string `json:"runtime_version"`
	// Network is the egress policy its children start with.
	Network NetworkPolicy `json:"network"`
}

// BranchRequest is the body of POST /v1/sandboxes/{id}/branch and
// /snapshot. With N > 0, branch also spawns N children from the new
// snapshot in the same call.
type BranchRequest struct {
	Tag     string `json:"tag,omitempty"` // empty: a generated tag
	N       int    `json:"n,omitempty"`
	TTLSecs int64  `json:"ttl_secs,omitempty"` // children's lifetime
	// Network is the new snapshot's and its children's egress policy;
	// nil: the source sandbox's.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Labels, User, Env and Cwd are the new snapshot's and its children's (see
	// CreateSandboxRequest); nil and "": the source sandbox's.
	Labels map[string]string `json:"labels,omitempty"`
	User   string            `json:"user,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
}

// BranchResponse is the new snapshot, how long the source was paused, and
// the children (with their tokens). PauseMs is the longest the source's
// agent went unanswered during the branch, as a client sees it; StoppedMs
// is how long the runtime had the source stopped.
type BranchResponse struct {
	SnapshotInfo
	PauseMs   float64       `json:"pause_ms"`
	StoppedMs float64       `json:"stopped_ms"`
	Children  []SandboxInfo `json:"children,omitempty"`
}
