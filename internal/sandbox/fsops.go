package sandbox

import (
	"context"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// MkdirRequest makes a directory and its missing parents; one that exists
// already is not an error.
type MkdirRequest struct {
	Path string
	Mode uint32 // permission bits; 0 means 0755
}

// MoveRequest renames From to To, refusing an existing To (ErrConflict)
// unless Overwrite. Symlinks at either end are moved or replaced, never
// followed.
type MoveRequest struct {
	From, To  string
	Overwrite bool
}

// RemoveRequest removes a path; a directory with entries only when
// Recursive (else ErrConflict).
type RemoveRequest struct {
	Path      string
	Recursive bool
}

// Stat describes a path, without following a symlink there.
func (sb *Sandbox) Stat(ctx context.Context, path string) (FileInfo, error) {
	if _, err := agentproto.ResolvePath(path); err != nil {
		return FileInfo{}, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return FileInfo{}, err
	}
	info, err := a.Stat(ctx, agentproto.StatRequest{Path: path})
	if err != nil {
		return FileInfo{}, sb.fail(err)
	}
	return fileInfo(info), nil
}

// Mkdir makes a directory, like mkdir -p.
func (sb *Sandbox) Mkdir(ctx context.Context, req MkdirRequest) (FileInfo, error) {
	if err := checkPathMode(req.Path, req.Mode); err != nil {
		return FileInfo{}, err
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return FileInfo{}, err
	}
	info, err := a.Mkdir(ctx, agentproto.MkdirRequest{Path: req.Path, Mode: req.Mode})
	if err != nil {
		return FileInfo{}, sb.fail(err)
	}
	return fileInfo(info), nil
}

// checkPathMode checks the path and permission bits of a call that makes
// a file or directory.
func checkPathMode(path string, mode uint32) error {
	if _, err := agentproto.ResolvePath(path); err != nil {
		return mapErr(err)
	}
	if mode > 0o7777 {
		return invalidf("mode %o is not a permission mode", mode)
	}
	return nil
}

// Move renames a file or directory and describes it at its new path.
func (sb *Sandbox) Move(ctx context.Context, req MoveRequest) (FileInfo, error) {
	for _, p := range []string{req.From, req.To} {
		if _, err := agentproto.ResolvePath(p); err != nil {
			return FileInfo{}, mapErr(err)
		}
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return FileInfo{}, err
	}
	info, err := a.Move(ctx, agentproto.MoveRequest{From: req.From, To: req.To, Overwrite: req.Overwrite})
	if err != nil {
		return FileInfo{}, sb.fail(err)
	}
	return fileInfo(info), nil
}

// Remove removes a file, a symlink (not its target) or a directory.
func (sb *Sandbox) Remove(ctx context.Context, req RemoveRequest) error {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return err
	}
	return sb.fail(a.Remove(ctx, agentproto.RemoveRequest{Path: req.Path, Recursive: req.Recursive}))
}
