package mcp

import (
	"context"
	"errors"
	"io/fs"

	"github.com/cove-sandbox/cove/pkg/apitype"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// addFSTools registers the file tools beside write, read and list.
func (s *Server) addFSTools() {
	add(s, tool("stat_file", "Describe a file in a sandbox",
		"Describe one path in a sandbox: type (file, dir, symlink, other), size, mode, modification time, and a symlink's target (a symlink is described as itself, not followed). A path that does not exist is an error saying so. Relative paths are under /work.",
		readOnly()), s.statFile)
	add(s, tool("make_dir", "Make a directory in a sandbox",
		"Make a directory in a sandbox with any missing parents, like mkdir -p; one that exists already is fine. mode is octal, default 0755. Returns the directory's details.",
		hints{idempotent: true}), s.makeDir)
	add(s, tool("move_file", "Move or rename a file in a sandbox",
		"Move or rename a file or directory in a sandbox, like mv. An existing target is refused unless overwrite=true (which replaces a file or an empty directory). A symlink is moved as itself. The target's parent directory must exist (make_dir). Returns the target's details.",
		hints{destructive: true}), s.moveFile)
	add(s, tool("remove_file", "Remove a file in a sandbox",
		"Remove a file, a symlink (not what it points to) or an empty directory in a sandbox; a directory with files in it only with recursive=true, which removes everything under it. Cannot be undone. /work itself and / cannot be removed.",
		hints{destructive: true, idempotent: true}), s.removeFile)
}

type statIn struct {
	DataRef
	Path string `json:"path" jsonschema:"the path; relative paths are under /work"`
}

func (s *Server) statFile(ctx context.Context, req *sdk.CallToolRequest, in statIn) (*sdk.CallToolResult, FileInfo, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, FileInfo{}, err
	}
	if in.Path == "" {
		return nil, FileInfo{}, errors.New("path is empty: give the path to describe, e.g. /work/main.py")
	}
	fi, err := s.apiOf(ctx).Stat(ctx, in.SandboxID, token, in.Path)
	if err != nil {
		return nil, FileInfo{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, fi, nil
}

type mkdirIn struct {
	DataRef
	Path string `json:"path" jsonschema:"the directory; relative paths are under /work"`
	Mode string `json:"mode,omitempty" jsonschema:"octal permission bits such as 0700; default 0755"`
}

func (s *Server) makeDir(ctx context.Context, req *sdk.CallToolRequest, in mkdirIn) (*sdk.CallToolResult, FileInfo, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, FileInfo{}, err
	}
	if in.Path == "" {
		return nil, FileInfo{}, errors.New("path is empty: give the directory to make, e.g. /work/src/pkg")
	}
	mode, err := apitype.ParseMode(in.Mode)
	if err != nil {
		return nil, FileInfo{}, err
	}
	fi, err := s.apiOf(ctx).MakeDir(ctx, in.SandboxID, token, in.Path, fs.FileMode(mode))
	if err != nil {
		return nil, FileInfo{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, fi, nil
}

type moveIn struct {
	DataRef
	From      string `json:"from" jsonschema:"the file or directory to move; relative paths are under /work"`
	To        string `json:"to" jsonschema:"its new path"`
	Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace an existing file (or empty directory) at to; default false"`
}

func (s *Server) moveFile(ctx context.Context, req *sdk.CallToolRequest, in moveIn) (*sdk.CallToolResult, FileInfo, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, FileInfo{}, err
	}
	if in.From == "" || in.To == "" {
		return nil, FileInfo{}, errors.New("give both from (what to move) and to (its new path)")
	}
	fi, err := s.apiOf(ctx).Move(ctx, in.SandboxID, token, in.From, in.To, in.Overwrite)
	if err != nil {
		return nil, FileInfo{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, fi, nil
}

type removeIn struct {
	DataRef
	Path      string `json:"path" jsonschema:"what to remove; relative paths are under /work"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"remove a directory and everything in it; default false"`
}

type removeOut struct {
	Removed string `json:"removed" jsonschema:"the path removed"`
}

func (s *Server) removeFile(ctx context.Context, req *sdk.CallToolRequest, in removeIn) (*sdk.CallToolResult, removeOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, removeOut{}, err
	}
	if in.Path == "" {
		return nil, removeOut{}, errors.New("path is empty: give the path to remove")
	}
	if err := s.apiOf(ctx).Remove(ctx, in.SandboxID, token, in.Path, in.Recursive); err != nil {
		return nil, removeOut{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, removeOut{Removed: in.Path}, nil
}
