package mcp

import (
	"context"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// The fake's pause and checkpoints: status changes and names, no state.

func (f *fakeAPI) setStatus(id, from, to string) (apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return apitype.SandboxInfo{}, notFound("sandbox " + id)
	}
	if sb.info.Status != from {
		return apitype.SandboxInfo{}, &client.Error{Status: http.StatusConflict, Code: apitype.CodeConflict, Message: "sandbox " + id + " is " + sb.info.Status}
	}
	sb.info.Status = to
	info := sb.info
	info.Token = ""
	return info, nil
}

func (f *fakeAPI) PauseSandbox(ctx context.Context, id string) (apitype.SandboxInfo, error) {
	return f.setStatus(id, apitype.StatusRunning, apitype.StatusPaused)
}

func (f *fakeAPI) ResumeSandbox(ctx context.Context, id string, ttlSecs int64) (apitype.SandboxInfo, error) {
	return f.setStatus(id, apitype.StatusPaused, apitype.StatusRunning)
}

func (f *fakeAPI) Checkpoint(ctx context.Context, id, token, name string) (apitype.CheckpointInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return apitype.CheckpointInfo{}, err
	}
	return apitype.CheckpointInfo{Name: name, SizeBytes: 1 << 20, CreatedAtUnix: time.Now().Unix(), PauseMs: 5}, nil
}

func (f *fakeAPI) Checkpoints(ctx context.Context, id, token string) ([]apitype.CheckpointInfo, error) {
	return nil, nil
}

func (f *fakeAPI) Rollback(ctx context.Context, id, token, name string) (apitype.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.SandboxInfo{}, err
	}
	info := sb.info
	info.Token = ""
	return info, nil
}
