package sandbox

import (
	"context"
	"io"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// TarPutRequest extracts a tar stream into the directory Path, made with
// its parents if missing; its entries are owned by User ("": the
// sandbox's default user).
type TarPutRequest struct {
	Path string
	User string
}

// TarResult counts what an extraction wrote; Skipped are the device
// nodes, FIFOs and sockets it does not make.
type TarResult struct {
	Files, Dirs, Symlinks, Links, Skipped int64
	Bytes                                 int64 // of regular files
}

// PutTar extracts the tar stream read from r into a directory. Entries
// that would land outside it (absolute, "..", through a symlink) are
// refused with ErrInvalid, naming the entry.
func (sb *Sandbox) PutTar(ctx context.Context, req TarPutRequest, r io.Reader) (TarResult, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return TarResult{}, mapErr(err)
	}
	if err := agentproto.CheckUser(req.User); err != nil {
		return TarResult{}, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return TarResult{}, err
	}
	res, err := a.TarPut(ctx, agentproto.TarPutRequest{Path: req.Path, User: sb.b.userOr(req.User)}, r)
	if err != nil {
		return TarResult{}, sb.fail(err)
	}
	return TarResult{Files: res.Files, Dirs: res.Dirs, Symlinks: res.Symlinks, Links: res.Links, Skipped: res.Skipped, Bytes: res.Bytes}, nil
}

// GetTar opens the tree under a directory as a tar stream: names relative
// to it, symlinks as themselves. The caller closes the reader; a stream
// cut short fails its read.
func (sb *Sandbox) GetTar(ctx context.Context, path string) (io.ReadCloser, error) {
	if _, err := agentproto.ResolvePath(path); err != nil {
		return nil, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return nil, err
	}
	rc, err := a.TarGet(ctx, agentproto.TarGetRequest{Path: path})
	if err != nil {
		return nil, sb.fail(err)
	}
	return rc, nil
}
