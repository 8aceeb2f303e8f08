// Package fakedaemon is an in-memory cove daemon for tests of API
// clients (the CLI, the bench): sandboxes, snapshots with pools, spawn,
// exec and branch, network policies and exposed ports, enough for their
// bookkeeping, and nothing run.
package fakedaemon

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Daemon is an http.Handler answering the API's sandbox and snapshot
// routes. Each sandbox and snapshot carries the text of its /tmp/chain,
// which exec appends to ("echo D >> /tmp/chain") and reads ("cat
// /tmp/chain"), and branch copies. Tokens are checked as the daemon
// checks them: exec and branch take the sandbox's, and spawning from a
// branch takes its source's.
type Daemon struct {
	// Info is what GET /v1/info answers; set it before serving.
	Info apitype.Info

	mux       *http.ServeMux
	mu        sync.Mutex
	next      int
	sandboxes map[string]*sandbox
	snapshots map[string]*snapshot
	// Sandboxes the fake makes but does not return, as a spawn cut short
	// would.
	dropSpawns bool
	// deletes of snapshots refused with a conflict.
	conflicts int
}

type sandbox struct {
	info  apitype.SandboxInfo
	chain string
	ports map[int]apitype.PortInfo
	files map[string][]byte // what PUT /files wrote, by path
}

type snapshot struct {
	info  apitype.SnapshotInfo
	chain string
	token string // of the sandbox it was saved from; "" if built
}

// New returns a gVisor daemon with no sandboxes and no snapshots.
func New() *Daemon {
	f := &Daemon{
		Info:      apitype.Info{Version: "test", Backend: "gvisor"},
		mux:       http.NewServeMux(),
		sandboxes: map[string]*sandbox{},
		snapshots: map[string]*snapshot{},
	}
	routes := map[string]func(*http.Request) (int, any){
		"GET /healthz":                           func(*http.Request) (int, any) { return 200, map[string]bool{"ok": true} },
		"GET /v1/info":                           func(*http.Request) (int, any) { return 200, f.Info },
		"POST /v1/snapshots":                     f.createSnapshot,
		"GET /v1/snapshots":                      f.listSnapshots,
		"GET /v1/snapshots/{tag}":                f.getSnapshot,
		"DELETE /v1/snapshots/{tag}":             f.deleteSnapshot,
		"POST /v1/sandboxes":                     f.createSandboxes,
		"GET /v1/sandboxes":                      f.listSandboxes,
		"GET /v1/sandboxes/{id}":                 f.onSandbox(f.getSandbox),
		"DELETE /v1/sandboxes/{id}":              f.onSandbox(f.deleteSandbox),
		"PUT /v1/sandboxes/{id}/network":         f.onSandbox(f.setNetwork),
		"POST /v1/sandboxes/{id}/ports":          f.inSandbox(f.exposePort),
		"GET /v1/sandboxes/{id}/ports":           f.inSandbox(f.listPorts),
		"DELETE /v1/sandboxes/{id}/ports/{port}": f.inSandbox(f.unexposePort),
		"POST /v1/sandboxes/{id}/exec":           f.inSandbox(f.exec),
		"POST /v1/sandboxes/{id}/branch":         f.inSandbox(f.branch),
		"POST /v1/sandboxes/{id}/snapshot":       f.inSandbox(f.branch),
	}
	for pattern, h := range routes {
		f.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			status, v := h(r)
			f.mu.Unlock()
			if lines, ok := v.(ndjson); ok {
				w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
				w.WriteHeader(status)
				for _, l := range lines {
					json.NewEncoder(w).Encode(l)
					w.(http.Flusher).Flush()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			if v != nil {
				json.NewEncoder(w).Encode(v)
			}
		})
	}
	f.mux.HandleFunc("GET /v1/sandboxes/{id}/ports/{port}/connect", f.connect)
	f.fileRoutes()
	return f
}

// ndjson is an answer streamed one value a line.
type ndjson []any

// ServeHTTP implements http.Handler.
func (f *Daemon) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.mux.ServeHTTP(w, r) }

func fail(status int, code, msg string) (int, any) {
	return status, apitype.ErrorBody{Error: msg, Code: code}
}

// decode reads the request's JSON body into v; the callers are trusted.
func decode(r *http.Request, v any) { json.NewDecoder(r.Body).Decode(v) }

// createSnapshot builds a snapshot; a build that accepts NDJSON streams
// "warming: WARM" as the warm command's output first.
func (f *Daemon) createSnapshot(r *http.Request) (int, any) {
	var req apitype.CreateSnapshotRequest
	decode(r, &req)
	if f.snapshots[req.Tag] != nil {
		return fail(409, apitype.CodeConflict, "exists")
	}
	si := apitype.SnapshotInfo{Tag: req.Tag, Backend: "gvisor", SizeBytes: 1 << 20}
	if req.PoolSize != nil {
		si.PoolSize = *req.PoolSize
		si.PoolReady = si.PoolSize
	}
	if req.Network != nil {
		si.Network = *req.Network
	}
	f.snapshots[req.Tag] = &snapshot{info: si}
	if strings.Contains(r.Header.Get("Accept"), apitype.ContentTypeNDJSON) {
		return 200, ndjson{apitype.SnapshotBuildEvent{Output: "warming: " + req.Warm + "\n"}, apitype.SnapshotBuildEvent{Snapshot: &si}}
	}
	return 201, si
}

func (f *Daemon) listSnapshots(*http.Request) (int, any) {
	out := []apitype.SnapshotInfo{}
	for _, s := range f.snapshots {
		out = append(out, s.info)
	}
	return 200, out
}

func (f *Daemon) getSnapshot(r *http.Request) (int, any) {
	tag := r.PathValue("tag")
	s := f.snapshots[tag]
	if s == nil {
		return fail(404, apitype.CodeNotFound, "no snapshot "+tag)
	}
	// The pool refills by one per look.
	s.info.PoolReady = min(s.info.PoolReady+1, s.info.PoolSize)
	return 200, s.info
}

func (f *Daemon) deleteSnapshot(r *http.Request) (int, any) {
	tag := r.PathValue("tag")
	if f.snapshots[tag] == nil {
		return fail(404, apitype.CodeNotFound, "no snapshot "+tag)
	}
	for _, sb := range f.sandboxes {
		if sb.info.SnapshotTag == tag {
			f.conflicts++
			return fail(409, apitype.CodeConflict, "in use by "+sb.info.ID)
		}
	}
	for _, o := range f.snapshots {
		if o.info.Parent == tag {
			f.conflicts++
			return fail(409, apitype.CodeConflict, "parent of "+o.info.Tag)
		}
	}
	delete(f.snapshots, tag)
	return 204, nil
}

// add makes a sandbox spawned from tag with the given /tmp/chain,
// network policy and labels.
func (f *Daemon) add(tag, chain string, p apitype.NetworkPolicy, labels map[string]string) apitype.SandboxInfo {
	f.next++
	id := fmt.Sprintf("sb-%d", f.next)
	info := apitype.SandboxInfo{ID: id, Status: "running", SnapshotTag: tag, Token: "tok-" + id, Network: p, Labels: labels}
	f.sandboxes[info.ID] = &sandbox{info: info, chain: chain, ports: map[int]apitype.PortInfo{}, files: map[string][]byte{}}
	return info
}

func (f *Daemon) createSandboxes(r *http.Request) (int, any) {
	var req apitype.CreateSandboxRequest
	decode(r, &req)
	var chain string
	var policy apitype.NetworkPolicy
	if req.SnapshotTag != "" {
		s := f.snapshots[req.SnapshotTag]
		if s == nil {
			return fail(404, apitype.CodeNotFound, "no snapshot "+req.SnapshotTag)
		}
		if s.token != "" && r.Header.Get(apitype.SandboxTokenHeader) != s.token {
			return fail(403, apitype.CodeForbidden, "snapshot "+req.SnapshotTag+" takes the token of "+s.info.BranchedFrom)
		}
		chain, policy = s.chain, s.info.Network
		if s.info.PoolReady > 0 {
			s.info.PoolReady--
		}
	}
	if req.Network != nil {
		policy = *req.Network
	}
	var out []apitype.SandboxInfo
	for range max(req.N, 1) {
		out = append(out, f.add(req.SnapshotTag, chain, policy, req.Labels))
	}
	if f.dropSpawns && req.SnapshotTag != "" {
		return fail(504, apitype.CodeTimeout, "took too long")
	}
	return 201, out
}

func (f *Daemon) listSandboxes(*http.Request) (int, any) {
	out := []apitype.SandboxInfo{}
	for _, sb := range f.sandboxes {
		info := sb.info
		info.Token = ""
		out = append(out, info)
	}
	return 200, out
}

// onSandbox adapts a handler of the sandbox the path names, answering 404
// if there is none.
func (f *Daemon) onSandbox(h func(*sandbox, *http.Request) (int, any)) func(*http.Request) (int, any) {
	return func(r *http.Request) (int, any) {
		id := r.PathValue("id")
		sb := f.sandboxes[id]
		if sb == nil {
			return fail(404, apitype.CodeNotFound, "no sandbox "+id)
		}
		return h(sb, r)
	}
}

// inSandbox is onSandbox for a call that takes the sandbox's token too:
// 403 without it.
func (f *Daemon) inSandbox(h func(*sandbox, *http.Request) (int, any)) func(*http.Request) (int, any) {
	return f.onSandbox(func(sb *sandbox, r *http.Request) (int, any) {
		if r.Header.Get(apitype.SandboxTokenHeader) != sb.info.Token {
			return fail(403, apitype.CodeForbidden, "wrong token for sandbox "+sb.info.ID)
		}
		return h(sb, r)
	})
}

// public is a sandbox's description as GET shows it: no tokens.
func (sb *sandbox) public() apitype.SandboxInfo {
	info := sb.info
	info.Token = ""
	info.Ports = nil
	for _, p := range slices.Sorted(maps.Keys(sb.ports)) {
		pi := sb.ports[p]
		pi.Token = ""
		info.Ports = append(info.Ports, pi)
	}
	return info
}

func (f *Daemon) getSandbox(sb *sandbox, _ *http.Request) (int, any) { return 200, sb.public() }

func (f *Daemon) deleteSandbox(sb *sandbox, _ *http.Request) (int, any) {
	delete(f.sandboxes, sb.info.ID)
	return 204, nil
}

func (f *Daemon) exec(sb *sandbox, r *http.Request) (int, any) {
	var req apitype.ExecRequest
	decode(r, &req)
	var res apitype.ExecResponse
	if line, ok := strings.CutPrefix(req.Shell, "echo "); ok {
		sb.chain += strings.TrimSuffix(line, " >> /tmp/chain") + "\n"
	} else if slices.Equal(req.Args, []string{"cat", "/tmp/chain"}) {
		res.Stdout = sb.chain
	} else if len(req.Args) > 0 && req.Args[0] == "echo" {
		res.Stdout = strings.Join(req.Args[1:], " ") + "\n"
	}
	return 200, res
}

func (f *Daemon) branch(sb *sandbox, r *http.Request) (int, any) {
	var req apitype.BranchRequest
	decode(r, &req)
	si := apitype.SnapshotInfo{Tag: req.Tag, BranchedFrom: sb.info.ID, Parent: sb.info.SnapshotTag, Network: sb.info.Network}
	if req.Network != nil {
		si.Network = *req.Network
	}
	if p := f.snapshots[sb.info.SnapshotTag]; p != nil {
		si.Depth = p.info.Depth + 1
	}
	f.snapshots[req.Tag] = &snapshot{info: si, chain: sb.chain, token: sb.info.Token}
	br := apitype.BranchResponse{SnapshotInfo: si, PauseMs: 42, StoppedMs: 7}
	for range req.N {
		br.Children = append(br.Children, f.add(req.Tag, sb.chain, si.Network, req.Labels))
	}
	return 201, br
}

// SetDropSpawns makes spawns from a snapshot make their sandboxes but
// fail, as a spawn cut short would.
func (f *Daemon) SetDropSpawns(drop bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropSpawns = drop
}

// Conflicts is how many snapshot deletes were refused as in use.
func (f *Daemon) Conflicts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conflicts
}

// Sandboxes returns the ids of the sandboxes alive, sorted.
func (f *Daemon) Sandboxes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.sandboxes))
}

// Snapshots returns the tags of the snapshots, sorted.
func (f *Daemon) Snapshots() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.snapshots))
}
