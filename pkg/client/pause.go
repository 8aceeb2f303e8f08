package client

import (
	"context"
	"net/http"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// PauseSandbox saves the running sandbox id to disk and frees its memory
// and processes; its lifetime stands still until it is resumed.
func (c *Client) PauseSandbox(ctx context.Context, id string) (apitype.SandboxInfo, error) {
	var out apitype.SandboxInfo
	err := c.call(ctx, SlowTimeout, http.MethodPost, sandboxPath(id, "/pause"), nil, "", nil, &out)
	return out, err
}

// ResumeSandbox restores a paused sandbox under its own id and token;
// ttlSecs, if positive, is its lifetime from now, else what it had left.
func (c *Client) ResumeSandbox(ctx context.Context, id string, ttlSecs int64) (apitype.SandboxInfo, error) {
	var out apitype.SandboxInfo
	err := c.call(ctx, SlowTimeout, http.MethodPost, sandboxPath(id, "/resume"), nil, "",
		apitype.ResumeRequest{TTLSecs: ttlSecs}, &out)
	return out, err
}

// Checkpoint saves the running sandbox's state as checkpoint name ("": a
// made-up one) while it keeps running.
func (c *Client) Checkpoint(ctx context.Context, id, sandboxToken, name string) (apitype.CheckpointInfo, error) {
	var out apitype.CheckpointInfo
	err := c.call(ctx, SlowTimeout, http.MethodPost, sandboxPath(id, "/checkpoints"), nil, sandboxToken,
		apitype.CheckpointRequest{Name: name}, &out)
	return out, err
}

// Checkpoints lists the sandbox's checkpoints, oldest first.
func (c *Client) Checkpoints(ctx context.Context, id, sandboxToken string) ([]apitype.CheckpointInfo, error) {
	var out apitype.CheckpointsResponse
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, "/checkpoints"), nil, sandboxToken, nil, &out)
	return out.Checkpoints, err
}

// Rollback restores checkpoint name into the sandbox, in place: same id
// and token, its memory, processes and files as at the checkpoint.
func (c *Client) Rollback(ctx context.Context, id, sandboxToken, name string) (apitype.SandboxInfo, error) {
	var out apitype.SandboxInfo
	err := c.call(ctx, SlowTimeout, http.MethodPost, sandboxPath(id, "/rollback"), nil, sandboxToken,
		apitype.RollbackRequest{Checkpoint: name}, &out)
	return out, err
}
