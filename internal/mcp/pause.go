package mcp

import (
	"context"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// addPauseTools registers pause/resume and checkpoint/rollback.
func (s *Server) addPauseTools() {
	add(s, tool("pause_sandbox", "Pause a sandbox to disk",
		"Save a running sandbox whole (memory, processes, files) to the daemon's disk and free everything it held on the host; its lifetime stands still while paused. resume_sandbox restores it later under the same id and token, processes running on where they stood. Calls to a paused sandbox fail until it is resumed (unless it was created with auto_resume).",
		hints{}), s.pauseSandbox)
	add(s, tool("resume_sandbox", "Resume a paused sandbox",
		"Restore a paused sandbox under its own id and token, with the lifetime it had left (or ttl_secs from now): its processes, Python interpreter and files are as they were at the pause.",
		hints{}), s.resumeSandbox)
	add(s, tool("checkpoint_sandbox", "Checkpoint a sandbox",
		"Save a running sandbox's full state (memory, processes, files) as a named checkpoint while it keeps running, to undo later with rollback_sandbox. Names are unique per sandbox; empty: one is made up. Returns its name, size and how long the sandbox stood still.",
		hints{}), s.checkpointSandbox)
	add(s, tool("rollback_sandbox", "Roll a sandbox back to a checkpoint",
		"Undo: restore a checkpoint (checkpoint_sandbox) into the same sandbox, in place. Same id, token, network policy and labels; files, processes and Python variables exactly as at the checkpoint, everything since lost. A checkpoint can be rolled back to again and again.",
		hints{destructive: true, idempotent: true}), s.rollbackSandbox)
}

// pauseIn is create_sandbox's pause policy.
type pauseIn struct {
	AutoResume bool   `json:"auto_resume,omitempty" jsonschema:"resume the sandbox when a call reaches it while it is paused (pause_sandbox)"`
	OnExpiry   string `json:"on_expiry,omitempty" jsonschema:"at the end of its lifetime: kill (the default) or pause (resume_sandbox brings it back)"`
}

type resumeIn struct {
	SandboxRef
	TTLSecs int64 `json:"ttl_secs,omitempty" jsonschema:"its lifetime from now in seconds; empty: what it had left at the pause"`
}

func (s *Server) pauseSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxRef) (*sdk.CallToolResult, Sandbox, error) {
	info, err := s.apiOf(ctx).PauseSandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, Sandbox{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, toSandbox(info, s.session(req), time.Now()), nil
}

func (s *Server) resumeSandbox(ctx context.Context, req *sdk.CallToolRequest, in resumeIn) (*sdk.CallToolResult, Sandbox, error) {
	info, err := s.apiOf(ctx).ResumeSandbox(ctx, in.SandboxID, in.TTLSecs)
	if err != nil {
		return nil, Sandbox{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, toSandbox(info, s.session(req), time.Now()), nil
}

type checkpointIn struct {
	DataRef
	Name string `json:"name,omitempty" jsonschema:"the checkpoint's name: letters, digits, '.', '_' or '-'; empty: a made-up one"`
}

type checkpointOut struct {
	Name          string `json:"name"`
	SizeBytes     int64  `json:"size_bytes" jsonschema:"the disk it takes"`
	CreatedAtUnix int64  `json:"created_at_unix"`
	PauseMs       int64  `json:"pause_ms" jsonschema:"how long the sandbox stood still while it was saved"`
}

func (s *Server) checkpointSandbox(ctx context.Context, req *sdk.CallToolRequest, in checkpointIn) (*sdk.CallToolResult, checkpointOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, checkpointOut{}, err
	}
	c, err := s.apiOf(ctx).Checkpoint(ctx, in.SandboxID, token, in.Name)
	if err != nil {
		return nil, checkpointOut{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, checkpointOut{Name: c.Name, SizeBytes: c.SizeBytes, CreatedAtUnix: c.CreatedAtUnix, PauseMs: c.PauseMs}, nil
}

type rollbackIn struct {
	DataRef
	Checkpoint string `json:"checkpoint" jsonschema:"the name of the checkpoint to restore"`
}

func (s *Server) rollbackSandbox(ctx context.Context, req *sdk.CallToolRequest, in rollbackIn) (*sdk.CallToolResult, Sandbox, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, Sandbox{}, err
	}
	info, err := s.apiOf(ctx).Rollback(ctx, in.SandboxID, token, in.Checkpoint)
	if err != nil {
		return nil, Sandbox{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, toSandbox(info, s.session(req), time.Now()), nil
}
