package mcp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Sandbox is a sandbox as the tools report it.
type Sandbox struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	SnapshotTag   string `json:"snapshot_tag,omitempty" jsonschema:"the snapshot it was spawned from, if any"`
	Image         string `json:"image"`
	Backend       string `json:"backend"`
	CPUs          int    `json:"cpus"`
	MemoryMiB     int    `json:"memory_mib"`
	DiskMiB       int    `json:"disk_mib" jsonschema:"disk space it may write, in MiB"`
	Pids          int    `json:"pids" jsonschema:"most processes and threads it may run"`
	CreatedAtUnix int64  `json:"created_at_unix"`
	ExpiresAtUnix int64  `json:"expires_at_unix"`
	ExpiresInSecs int64  `json:"expires_in_secs" jsonschema:"seconds until the sandbox is destroyed; extend_sandbox pushes this out"`
	Token         string `json:"token,omitempty" jsonschema:"the sandbox's token: only in the result that created it; this session remembers it"`
	DeadReason    string `json:"dead_reason,omitempty" jsonschema:"set when status is dead: why it died (exited, oom_killed, unreachable)"`
	Network       Policy `json:"network" jsonschema:"its egress policy: what it may reach; empty denies everything"`
	Ports         []Port `json:"ports,omitempty" jsonschema:"its exposed ports (expose_port gives their tokens)"`
	// Labels, User (its default user), Env and Cwd come from its create, or
	// its snapshot.
	Labels map[string]string `json:"labels,omitempty" jsonschema:"its labels"`
	User   string            `json:"user,omitempty" jsonschema:"the account commands run as when they name none; absent: root"`
	Env    map[string]string `json:"env,omitempty" jsonschema:"environment variables every command in it gets"`
	Cwd    string            `json:"cwd,omitempty" jsonschema:"working directory of commands that name none; absent: /work"`
	// SessionHasToken tells the model whether it may omit sandbox_token.
	SessionHasToken bool `json:"session_has_token" jsonschema:"whether this MCP session knows the sandbox's token, so that sandbox_token may be omitted"`
}

func toSandbox(info apitype.SandboxInfo, st *session, now time.Time) Sandbox {
	return Sandbox{
		ID: info.ID, Status: info.Status, SnapshotTag: info.SnapshotTag, Image: info.Image, Backend: info.Backend,
		CPUs: info.CPUs, MemoryMiB: info.MemoryMiB, DiskMiB: info.DiskMiB, Pids: info.Pids,
		CreatedAtUnix: info.CreatedAtUnix, ExpiresAtUnix: info.ExpiresAtUnix,
		ExpiresInSecs:   max(0, info.ExpiresAtUnix-now.Unix()),
		Token:           info.Token,
		DeadReason:      info.DeadReason,
		Network:         Policy(info.Network),
		Ports:           toPorts(info.Ports),
		Labels:          info.Labels,
		User:            info.User,
		Env:             info.Env,
		Cwd:             info.Cwd,
		SessionHasToken: info.Token != "" || st.hasToken(info.ID),
	}
}

// created converts the answer of a call that made sandboxes, whose tokens
// appear nowhere else, and remembers the tokens.
func created(infos []apitype.SandboxInfo, st *session) []Sandbox {
	now := time.Now()
	out := make([]Sandbox, len(infos))
	for i, info := range infos {
		st.remember(info.ID, info.Token)
		out[i] = toSandbox(info, st, now)
	}
	return out
}

// SandboxRef names the sandbox a control-plane tool acts on.
type SandboxRef struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as returned by create_sandbox, spawn_sandboxes, branch_sandbox or list_sandboxes"`
}

// Snapshot is a snapshot as the tools report it.
type Snapshot = apitype.SnapshotInfo

type listSnapshotsOut struct {
	Snapshots []Snapshot `json:"snapshots"`
}

func (s *Server) listSnapshots(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, listSnapshotsOut, error) {
	snaps, err := s.apiOf(ctx).ListSnapshots(ctx)
	if err != nil {
		return nil, listSnapshotsOut{}, s.explain(ctx, err, "")
	}
	if snaps == nil {
		snaps = []Snapshot{}
	}
	return nil, listSnapshotsOut{Snapshots: snaps}, nil
}

type createIn struct {
	SnapshotTag  string  `json:"snapshot_tag,omitempty" jsonschema:"snapshot to start from (see list_snapshots); empty: cold start from the image"`
	SandboxToken string  `json:"sandbox_token,omitempty" jsonschema:"only for a snapshot saved from a sandbox (branched_from set) that this session did not branch or save: that sandbox's token"`
	Image        string  `json:"image,omitempty" jsonschema:"image to cold start from when no snapshot_tag is given; empty: the default image"`
	TTLSecs      int64   `json:"ttl_secs,omitempty" jsonschema:"lifetime in seconds; empty: the daemon's default (see get_service_info)"`
	CPUs         int     `json:"cpus,omitempty" jsonschema:"vCPUs; empty: the daemon's default"`
	MemoryMiB    int     `json:"memory_mib,omitempty" jsonschema:"memory in MiB; empty: the daemon's default"`
	DiskMiB      int     `json:"disk_mib,omitempty" jsonschema:"disk space it may write, in MiB; empty: the daemon's default"`
	Network      *Policy `json:"network,omitempty" jsonschema:"what it may reach; empty: nothing, or a snapshot's policy when starting from one"`
	metaIn
	pauseIn
}

// metaIn is what create, spawn and branch take about the sandboxes they
// make beyond resources; it carries over to branches and spawns of them.
type metaIn struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"key/value labels (keys: a-z 0-9 . _ / -, at most 63 characters; at most 64 labels); list_sandboxes filters by them; empty: a snapshot's or the source's"`
	User   string            `json:"user,omitempty" jsonschema:"the account commands run as when they name none: root or user; empty: a snapshot's or the source's, else root"`
	Env    map[string]string `json:"env,omitempty" jsonschema:"environment variables every command gets (a command's own env comes on top); empty: a snapshot's or the source's"`
	Cwd    string            `json:"cwd,omitempty" jsonschema:"working directory of commands that name none, an existing directory; empty: a snapshot's or the source's, else /work"`
}

func (s *Server) createSandbox(ctx context.Context, req *sdk.CallToolRequest, in createIn) (*sdk.CallToolResult, Sandbox, error) {
	infos, err := s.apiOf(ctx).CreateSandboxes(ctx, apitype.CreateSandboxRequest{
		SnapshotTag: in.SnapshotTag, Image: in.Image, TTLSecs: in.TTLSecs, CPUs: in.CPUs, MemoryMiB: in.MemoryMiB,
		DiskMiB: in.DiskMiB, SandboxToken: s.session(req).snapshotToken(in.SnapshotTag, in.SandboxToken),
		Network: apiPolicy(in.Network), Labels: in.Labels, User: in.User, Env: in.Env, Cwd: in.Cwd,
		AutoResume: in.AutoResume, OnExpiry: in.OnExpiry,
	})
	if err != nil {
		return nil, Sandbox{}, s.explainSpawn(ctx, err, in.SnapshotTag)
	}
	if len(infos) != 1 {
		return nil, Sandbox{}, fmt.Errorf("the daemon made %d sandboxes instead of 1; see list_sandboxes", len(infos))
	}
	return nil, created(infos, s.session(req))[0], nil
}

type spawnIn struct {
	SnapshotTag  string  `json:"snapshot_tag" jsonschema:"the snapshot to spawn from (see list_snapshots)"`
	SandboxToken string  `json:"sandbox_token,omitempty" jsonschema:"only for a snapshot saved from a sandbox (branched_from set) that this session did not branch or save: that sandbox's token"`
	N            int     `json:"n,omitempty" jsonschema:"how many sandboxes; default 1"`
	TTLSecs      int64   `json:"ttl_secs,omitempty" jsonschema:"lifetime of each, in seconds; empty: the daemon's default"`
	Prewarm      bool    `json:"prewarm,omitempty" jsonschema:"accepted for compatibility; every spawn refills the snapshot's pool of ready sandboxes in the background"`
	Network      *Policy `json:"network,omitempty" jsonschema:"what each may reach; empty: the snapshot's policy"`
	metaIn
}

type sandboxesOut struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (s *Server) spawnSandboxes(ctx context.Context, req *sdk.CallToolRequest, in spawnIn) (*sdk.CallToolResult, sandboxesOut, error) {
	if in.SnapshotTag == "" {
		return nil, sandboxesOut{}, errors.New("snapshot_tag is empty: pick one from list_snapshots, or use create_sandbox to cold start from an image")
	}
	if in.N < 0 {
		return nil, sandboxesOut{}, errors.New("n must be positive")
	}
	infos, err := s.apiOf(ctx).CreateSandboxes(ctx, apitype.CreateSandboxRequest{
		SnapshotTag: in.SnapshotTag, N: max(in.N, 1), TTLSecs: in.TTLSecs, Prewarm: in.Prewarm,
		SandboxToken: s.session(req).snapshotToken(in.SnapshotTag, in.SandboxToken), Network: apiPolicy(in.Network),
		Labels: in.Labels, User: in.User, Env: in.Env, Cwd: in.Cwd,
	})
	if err != nil {
		return nil, sandboxesOut{}, s.explainSpawn(ctx, err, in.SnapshotTag)
	}
	return nil, sandboxesOut{Sandboxes: created(infos, s.session(req))}, nil
}

type branchIn struct {
	DataRef
	Tag     string  `json:"tag,omitempty" jsonschema:"name for the new snapshot; empty: a generated one"`
	N       int     `json:"n,omitempty" jsonschema:"how many children to start; default 1 (use snapshot_sandbox for none)"`
	TTLSecs int64   `json:"ttl_secs,omitempty" jsonschema:"the children's lifetime in seconds; empty: the daemon's default"`
	Network *Policy `json:"network,omitempty" jsonschema:"what the children may reach; empty: the source sandbox's policy"`
	// Diff is forkd's flag; cove's branch always is incremental.
	Diff *bool `json:"diff,omitempty" jsonschema:"accepted for compatibility with forkd: cove's branch always saves only what changed since the sandbox's snapshot, whatever this says"`
	metaIn
}

type branchOut struct {
	Snapshot  Snapshot  `json:"snapshot" jsonschema:"the snapshot the children were spawned from; spawn more from it with spawn_sandboxes"`
	PauseMs   float64   `json:"pause_ms" jsonschema:"how long the source sandbox stood still (its agent unanswered) while its state was saved"`
	StoppedMs float64   `json:"stopped_ms" jsonschema:"how long the runtime had the source stopped"`
	Children  []Sandbox `json:"children"`
	// Incremental answers forkd's diff flag, when it was given.
	Incremental bool `json:"incremental,omitempty" jsonschema:"set when diff was given: the branch saved only what changed, as every cove branch does"`
}

func (s *Server) branchSandbox(ctx context.Context, req *sdk.CallToolRequest, in branchIn) (*sdk.CallToolResult, branchOut, error) {
	if in.N < 0 {
		return nil, branchOut{}, errors.New("n must be positive")
	}
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, branchOut{}, err
	}
	res, err := s.apiOf(ctx).Branch(ctx, in.SandboxID, token, apitype.BranchRequest{Tag: in.Tag, N: max(in.N, 1), TTLSecs: in.TTLSecs, Network: apiPolicy(in.Network),
		Labels: in.Labels, User: in.User, Env: in.Env, Cwd: in.Cwd})
	if err != nil {
		return nil, branchOut{}, s.explain(ctx, err, in.SandboxID)
	}
	s.session(req).rememberSnapshot(res.Tag, token)
	out := branchOut{Snapshot: res.SnapshotInfo, PauseMs: res.PauseMs, StoppedMs: res.StoppedMs, Children: created(res.Children, s.session(req))}
	if in.Diff != nil {
		out.Incremental = true
	}
	return nil, out, nil
}

type snapshotIn struct {
	DataRef
	Tag string `json:"tag,omitempty" jsonschema:"name for the snapshot; empty: a generated one"`
}

type snapshotOut struct {
	Snapshot Snapshot `json:"snapshot"`
	PauseMs  float64  `json:"pause_ms" jsonschema:"how long the sandbox was paused while its state was saved"`
}

func (s *Server) snapshotSandbox(ctx context.Context, req *sdk.CallToolRequest, in snapshotIn) (*sdk.CallToolResult, snapshotOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, snapshotOut{}, err
	}
	res, err := s.apiOf(ctx).SnapshotSandbox(ctx, in.SandboxID, token, apitype.BranchRequest{Tag: in.Tag})
	if err != nil {
		return nil, snapshotOut{}, s.explain(ctx, err, in.SandboxID)
	}
	s.session(req).rememberSnapshot(res.Tag, token)
	return nil, snapshotOut{Snapshot: res.SnapshotInfo, PauseMs: res.PauseMs}, nil
}

type listSandboxesIn struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"list only the sandboxes that have all of these labels"`
}

func (s *Server) listSandboxes(ctx context.Context, req *sdk.CallToolRequest, in listSandboxesIn) (*sdk.CallToolResult, sandboxesOut, error) {
	infos, err := s.apiOf(ctx).ListSandboxes(ctx)
	if err != nil {
		return nil, sandboxesOut{}, s.explain(ctx, err, "")
	}
	st, now := s.session(req), time.Now()
	out := sandboxesOut{Sandboxes: []Sandbox{}}
	for _, info := range infos {
		if !hasLabels(info.Labels, in.Labels) {
			continue
		}
		info.Token = "" // never shown by a listing, whatever the daemon sends
		out.Sandboxes = append(out.Sandboxes, toSandbox(info, st, now))
	}
	sort.Slice(out.Sandboxes, func(i, j int) bool { return out.Sandboxes[i].CreatedAtUnix < out.Sandboxes[j].CreatedAtUnix })
	return nil, out, nil
}

func (s *Server) getSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxRef) (*sdk.CallToolResult, Sandbox, error) {
	info, err := s.apiOf(ctx).GetSandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, Sandbox{}, s.explain(ctx, err, in.SandboxID)
	}
	info.Token = ""
	return nil, toSandbox(info, s.session(req), time.Now()), nil
}

type extendIn struct {
	SandboxRef
	TTLSecs int64 `json:"ttl_secs" jsonschema:"the sandbox then expires this many seconds from now"`
}

func (s *Server) extendSandbox(ctx context.Context, req *sdk.CallToolRequest, in extendIn) (*sdk.CallToolResult, Sandbox, error) {
	if in.TTLSecs <= 0 {
		return nil, Sandbox{}, errors.New("ttl_secs must be positive: the sandbox then expires that many seconds from now")
	}
	info, err := s.apiOf(ctx).Extend(ctx, in.SandboxID, in.TTLSecs)
	if err != nil {
		return nil, Sandbox{}, s.explain(ctx, err, in.SandboxID)
	}
	info.Token = ""
	return nil, toSandbox(info, s.session(req), time.Now()), nil
}

type killOut struct {
	Killed string `json:"killed" jsonschema:"the id of the sandbox destroyed"`
}

func (s *Server) killSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxRef) (*sdk.CallToolResult, killOut, error) {
	if err := s.apiOf(ctx).DeleteSandbox(ctx, in.SandboxID); err != nil {
		return nil, killOut{}, s.explain(ctx, err, in.SandboxID)
	}
	s.session(req).forget(in.SandboxID)
	return nil, killOut{Killed: in.SandboxID}, nil
}
