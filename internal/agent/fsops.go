package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Stat describes a path without following a symlink there: a link is
// reported as itself, with its target.
func (a *Agent) Stat(ctx context.Context, req agentproto.StatRequest) (agentproto.FileInfo, error) {
	p, err := a.resolve(req.Path)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return agentproto.FileInfo{}, fsOpError(err)
	}
	return fileInfo(p, fi), nil
}

// Mkdir makes a directory and its missing parents, like mkdir -p. A
// directory there already, or a symlink to one, is not an error; anything
// else there is CodeExists.
func (a *Agent) Mkdir(ctx context.Context, req agentproto.MkdirRequest) (agentproto.FileInfo, error) {
	var info agentproto.FileInfo
	p, mode, err := a.resolveMode(req.Path, req.Mode, 0o755)
	if err != nil {
		return info, err
	}
	fi, err := os.Stat(p)
	switch {
	case err == nil && !fi.IsDir():
		return info, agentproto.Errorf(agentproto.CodeExists, "%s exists and is not a directory", p)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return info, fsOpError(err)
	case err != nil:
		if err := os.MkdirAll(p, fileMode(mode)); err != nil {
			return info, fsOpError(err)
		}
		// MkdirAll's mode passes through the umask: the caller's bits are
		// the ones asked for.
		if err := os.Chmod(p, fileMode(mode)); err != nil {
			return info, fsOpError(err)
		}
	}
	if fi, err = os.Lstat(p); err != nil {
		return info, fsOpError(err)
	}
	return fileInfo(p, fi), nil
}

// resolveMode resolves a path and checks the permission bits a call makes
// it with: def when mode is 0.
func (a *Agent) resolveMode(path string, mode, def uint32) (string, uint32, error) {
	p, err := a.resolve(path)
	if err != nil {
		return "", 0, err
	}
	if mode&^0o7777 != 0 {
		return "", 0, agentproto.Errorf(agentproto.CodeInvalid, "mode %#o has bits beyond 07777", mode)
	}
	if mode == 0 {
		mode = def
	}
	return p, mode, nil
}

// Move renames req.From to req.To. rename(2) never follows a symlink at
// either end, so a link is moved, or replaced, as itself. Without
// Overwrite an existing target is refused, atomically where the kernel
// has RENAME_NOREPLACE.
func (a *Agent) Move(ctx context.Context, req agentproto.MoveRequest) (agentproto.FileInfo, error) {
	var info agentproto.FileInfo
	from, err := a.resolve(req.From)
	if err != nil {
		return info, err
	}
	to, err := a.resolve(req.To)
	if err != nil {
		return info, err
	}
	if err := a.checkMutable(from, "move"); err != nil {
		return info, err
	}
	if to == "/" {
		return info, agentproto.Errorf(agentproto.CodeInvalid, "cannot move onto /")
	}
	if _, err := os.Lstat(from); err != nil {
		return info, fsOpError(err)
	}
	if from != to {
		if err := rename(from, to, req.Overwrite); err != nil {
			return info, fsOpError(err)
		}
	}
	fi, err := os.Lstat(to)
	if err != nil {
		return info, fsOpError(err)
	}
	return fileInfo(to, fi), nil
}

// rename is rename(2), or renameat2(2) with RENAME_NOREPLACE unless
// overwrite. A kernel without the flag gets a check before the rename.
// os.Rename is not used: it refuses every directory target, where the
// kernel replaces an empty one as mv does.
func rename(from, to string, overwrite bool) error {
	if overwrite {
		return pathError("rename", from, to, unix.Rename(from, to))
	}
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return pathError("rename", from, to, err)
	}
	if _, err := os.Lstat(to); err == nil {
		return pathError("rename", from, to, unix.EEXIST)
	}
	return pathError("rename", from, to, unix.Rename(from, to))
}

func pathError(op, from, to string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: from, New: to, Err: err}
}

// Remove removes a file, a symlink (never what it points to) or an empty
// directory, and with Recursive a directory and everything under it,
// without following the symlinks inside.
func (a *Agent) Remove(ctx context.Context, req agentproto.RemoveRequest) error {
	p, err := a.resolve(req.Path)
	if err != nil {
		return err
	}
	if err := a.checkMutable(p, "remove"); err != nil {
		return err
	}
	if _, err := os.Lstat(p); err != nil {
		return fsOpError(err)
	}
	if req.Recursive {
		return fsOpError(os.RemoveAll(p))
	}
	return fsOpError(os.Remove(p))
}

// checkMutable refuses to move or remove the root and the work directory:
// the agent and every command stand in them.
func (a *Agent) checkMutable(p, op string) error {
	if p == "/" || p == a.workDir {
		return agentproto.Errorf(agentproto.CodeInvalid, "cannot %s %s itself: name what is inside it", op, p)
	}
	return nil
}

// fsOpError is fsError with the codes of the calls here: a target that
// exists, a directory that is not empty.
func fsOpError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOTEMPTY):
		return agentproto.Errorf(agentproto.CodeNotEmpty, "%v: remove it with recursive, or what is inside it first", err)
	case errors.Is(err, fs.ErrExist):
		return agentproto.Errorf(agentproto.CodeExists, "%v: pass overwrite to replace it", err)
	case errors.Is(err, syscall.EINVAL):
		// rename(2): a directory into itself.
		return agentproto.Errorf(agentproto.CodeInvalid, "%v", err)
	}
	return fsError(err)
}
