package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// fakeAPI is an in-memory daemon: enough of it to drive the tools.
type fakeAPI struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]*fakeSandbox
	// branches holds, by tag, the token spawning from a saved snapshot takes.
	branches map[string]string
	execs    []apitype.ExecRequest
	// exec answers an exec; nil: echo the shell string to stdout.
	exec func(apitype.ExecRequest) apitype.ExecResponse
	// deleteGate, if set, holds every DeleteSandbox until it is closed.
	deleteGate chan struct{}
	// network is what Info says of the network.
	network apitype.NetworkInfo
	// usage answers Usage (usage_test.go); nil: 404, as a daemon that
	// meters nothing.
	usage func(client.UsageQuery) (apitype.Usage, error)
	// The last create and branch requests, and the user of the last put.
	lastCreate  apitype.CreateSandboxRequest
	lastBranch  apitype.BranchRequest
	lastPutUser string
	procs       []*fakeProc // background processes, every sandbox's
}

type fakeSandbox struct {
	info  apitype.SandboxInfo
	files map[string][]byte
	dirs  map[string]bool // made by MakeDir
}

func newFake() *fakeAPI {
	return &fakeAPI{sandboxes: make(map[string]*fakeSandbox), branches: make(map[string]string)}
}

func forbidden(what string) error {
	return &client.Error{Status: http.StatusForbidden, Code: apitype.CodeForbidden, Message: what}
}

func notFound(what string) error {
	return &client.Error{Status: http.StatusNotFound, Code: apitype.CodeNotFound, Message: what + " not found"}
}

// open checks a data-plane call's token, as the daemon does.
func (f *fakeAPI) open(id, token string) (*fakeSandbox, error) {
	sb, ok := f.sandboxes[id]
	if !ok {
		return nil, notFound("sandbox " + id)
	}
	if token != sb.info.Token {
		return nil, forbidden("wrong sandbox token")
	}
	return sb, nil
}

// add makes a sandbox directly, as another client would.
func (f *fakeAPI) add(snapshot string) apitype.SandboxInfo {
	f.next++
	id := fmt.Sprintf("sb%d", f.next)
	now := time.Now()
	info := apitype.SandboxInfo{ID: id, Status: apitype.StatusRunning, Backend: "fake", Image: "default", SnapshotTag: snapshot,
		CPUs: 1, MemoryMiB: 512, CreatedAtUnix: now.Unix(), ExpiresAtUnix: now.Add(15 * time.Minute).Unix(), Token: "tok-" + id}
	f.sandboxes[id] = &fakeSandbox{info: info, files: make(map[string][]byte)}
	return info
}

func (f *fakeAPI) BaseURL() string { return "http://fake" }

func (f *fakeAPI) Version(ctx context.Context) (apitype.VersionResponse, error) {
	return apitype.VersionResponse{Version: "v-fake"}, nil
}

func (f *fakeAPI) Info(ctx context.Context) (apitype.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return apitype.Info{Version: "v-fake", Backend: "fake", Sandboxes: len(f.sandboxes),
		Limits: apitype.Limits{MaxSandboxes: 10, MaxN: 100, MaxTTLSecs: 3600, DefaultTTLSecs: 900}, Network: f.network}, nil
}

func (f *fakeAPI) ListSnapshots(ctx context.Context) ([]apitype.SnapshotInfo, error) {
	return []apitype.SnapshotInfo{{Tag: "base", Backend: "fake"}}, nil
}

func (f *fakeAPI) CreateSandboxes(ctx context.Context, req apitype.CreateSandboxRequest) ([]apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCreate = req
	if tok, ok := f.branches[req.SnapshotTag]; ok && tok != req.SandboxToken {
		return nil, forbidden("snapshot " + req.SnapshotTag + " takes the token of its source")
	} else if !ok && req.SnapshotTag != "" && req.SnapshotTag != "base" {
		return nil, notFound("snapshot " + req.SnapshotTag)
	}
	var out []apitype.SandboxInfo
	for range max(req.N, 1) {
		info := f.add(req.SnapshotTag)
		if req.Network != nil {
			f.sandboxes[info.ID].info.Network = *req.Network
			info.Network = *req.Network
		}
		f.sandboxes[info.ID].info.Labels, info.Labels = req.Labels, req.Labels
		out = append(out, info)
	}
	return out, nil
}

// SetNetwork refuses a CIDR "bad", as the daemon refuses an invalid one.
func (f *fakeAPI) SetNetwork(ctx context.Context, id string, p apitype.NetworkPolicy) (apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return apitype.SandboxInfo{}, notFound("sandbox " + id)
	}
	if slices.Contains(p.AllowCIDRs, "bad") {
		return apitype.SandboxInfo{}, &client.Error{Status: 400, Code: apitype.CodeBadRequest, Message: `invalid network policy: "bad" is not a CIDR`}
	}
	sb.info.Network = p
	info := sb.info
	info.Token = ""
	return info, nil
}

func (f *fakeAPI) ExposePort(ctx context.Context, id, token string, port int, public bool) (apitype.PortInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.PortInfo{}, err
	}
	p := apitype.PortInfo{Port: port, Public: public, URL: fmt.Sprintf("http://%d-%s.localhost:8080", port, id)}
	sb.info.Ports = append(sb.info.Ports, p)
	if !public {
		p.Token = "pt-" + id
	}
	return p, nil
}

func (f *fakeAPI) ListSandboxes(ctx context.Context) ([]apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apitype.SandboxInfo
	for _, sb := range f.sandboxes {
		info := sb.info
		info.Token = ""
		out = append(out, info)
	}
	return out, nil
}

func (f *fakeAPI) GetSandbox(ctx context.Context, id string) (apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return apitype.SandboxInfo{}, notFound("sandbox " + id)
	}
	info := sb.info
	info.Token = ""
	return info, nil
}

func (f *fakeAPI) DeleteSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	gate := f.deleteGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok {
		return notFound("sandbox " + id)
	}
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeAPI) alive(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.sandboxes[id]
	return ok
}

func (f *fakeAPI) Extend(ctx context.Context, id string, ttlSecs int64) (apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return apitype.SandboxInfo{}, notFound("sandbox " + id)
	}
	sb.info.ExpiresAtUnix = time.Now().Unix() + ttlSecs
	info := sb.info
	info.Token = ""
	return info, nil
}

func (f *fakeAPI) Branch(ctx context.Context, id, token string, req apitype.BranchRequest) (apitype.BranchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return apitype.BranchResponse{}, err
	}
	f.lastBranch = req
	if req.Tag == "" {
		req.Tag = id + "-b"
	}
	f.branches[req.Tag] = token
	res := apitype.BranchResponse{SnapshotInfo: apitype.SnapshotInfo{Tag: req.Tag, BranchedFrom: id, Depth: 1, Network: f.sandboxes[id].info.Network}, PauseMs: 12.5}
	if req.Network != nil {
		res.Network = *req.Network
	}
	for range req.N {
		c := f.add(req.Tag)
		f.sandboxes[c.ID].info.Network, c.Network = res.Network, res.Network
		res.Children = append(res.Children, c)
	}
	return res, nil
}

func (f *fakeAPI) SnapshotSandbox(ctx context.Context, id, token string, req apitype.BranchRequest) (apitype.BranchResponse, error) {
	req.N = 0
	return f.Branch(ctx, id, token, req)
}

func (f *fakeAPI) Ping(ctx context.Context, id, token string) (apitype.PingResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return apitype.PingResponse{}, err
	}
	return apitype.PingResponse{OK: true, Hostname: id}, nil
}

func (f *fakeAPI) Exec(ctx context.Context, id, token string, req apitype.ExecRequest) (apitype.ExecResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return apitype.ExecResponse{}, err
	}
	f.execs = append(f.execs, req)
	if f.exec != nil {
		return f.exec(req), nil
	}
	return apitype.ExecResponse{Stdout: req.Shell}, nil
}

func (f *fakeAPI) lastExec() apitype.ExecRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.execs[len(f.execs)-1]
}

func (f *fakeAPI) Eval(ctx context.Context, id, token string, req apitype.EvalRequest) (apitype.EvalResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return apitype.EvalResponse{}, err
	}
	return apitype.EvalResponse{Result: "2"}, nil
}

func (f *fakeAPI) Wait(ctx context.Context, id, token string, req apitype.WaitRequest) (apitype.WaitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.WaitResponse{}, err
	}
	return apitype.WaitResponse{Found: bytes.Contains(sb.files[req.Path], []byte(req.Text))}, nil
}

func (f *fakeAPI) ListFiles(ctx context.Context, id, token, path string, depth int) (apitype.ListFilesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.ListFilesResponse{}, err
	}
	var out apitype.ListFilesResponse
	for p, b := range sb.files {
		out.Entries = append(out.Entries, apitype.FileInfo{Path: p, Type: "file", Size: int64(len(b))})
	}
	return out, nil
}

func (f *fakeAPI) PutFileAs(ctx context.Context, id, token, path string, mode fs.FileMode, user string, r io.Reader, size int64) (apitype.FileInfo, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return apitype.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.FileInfo{}, err
	}
	sb.files[path] = b
	f.lastPutUser = user
	return apitype.FileInfo{Path: path, Type: "file", Size: int64(len(b)), Mode: fmt.Sprintf("%04o", mode)}, nil
}

func (f *fakeAPI) GetFileRange(ctx context.Context, id, token, path string, offset, length int64) (io.ReadCloser, apitype.FileInfo, error) {
	rc, fi, err := f.GetFile(ctx, id, token, path)
	if err != nil {
		return nil, fi, err
	}
	if offset > fi.Size {
		return nil, fi, &client.Error{Status: 400, Code: apitype.CodeBadRequest, Message: fmt.Sprintf("range offset %d is outside %s (%d bytes)", offset, path, fi.Size)}
	}
	io.CopyN(io.Discard, rc, offset)
	// As the daemon's, a range is of the size the file reports.
	if length <= 0 || length > fi.Size-offset {
		length = fi.Size - offset
	}
	return io.NopCloser(io.LimitReader(rc, length)), fi, nil
}

func (f *fakeAPI) GetFile(ctx context.Context, id, token, path string) (io.ReadCloser, apitype.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return nil, apitype.FileInfo{}, err
	}
	b, ok := sb.files[path]
	if !ok {
		return nil, apitype.FileInfo{}, notFound("file " + path)
	}
	fi := apitype.FileInfo{Path: path, Type: "file", Size: int64(len(b))}
	if strings.HasPrefix(path, "/proc/") {
		fi.Size = 0 // as procfs reports it, though reading gives content
	}
	return io.NopCloser(bytes.NewReader(b)), fi, nil
}

func (f *fakeAPI) SandboxMetrics(ctx context.Context, id string) (apitype.SandboxMetrics, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return apitype.SandboxMetrics{}, notFound("sandbox " + id)
	}
	return apitype.SandboxMetrics{ID: id, Status: sb.info.Status, CPUSeconds: 1.5, MemoryBytes: 1 << 20, Cgroup: true}, nil
}
