package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"io"
	"os"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/fsutil"
)

// TarPut extracts a tar stream into a directory, made with its parents if
// missing, through fsutil.ExtractTar: nothing lands outside it. Every
// entry is owned by the call's user.
func (a *Agent) TarPut(ctx context.Context, req agentproto.TarPutRequest, r io.Reader) (agentproto.TarResult, error) {
	dir, err := a.resolve(req.Path)
	if err != nil {
		return agentproto.TarResult{}, err
	}
	acct, err := lookupUser(req.User)
	if err != nil {
		return agentproto.TarResult{}, err
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return agentproto.TarResult{}, agentproto.Errorf(agentproto.CodeInvalid, "%s is not a directory: name the directory to extract into", dir)
	}
	if err := acct.mkdirAll(dir); err != nil {
		return agentproto.TarResult{}, fsError(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return agentproto.TarResult{}, fsError(err)
	}
	defer root.Close()
	var owner *fsutil.Owner
	if acct != nil {
		owner = &fsutil.Owner{UID: int(acct.uid), GID: int(acct.gid)}
	}
	st, err := fsutil.ExtractTar(ctx, root, r, owner)
	res := agentproto.TarResult(st)
	if err != nil {
		// Read the rest, as the protocol asks.
		io.Copy(io.Discard, r)
		var te *fsutil.TarEntryError
		if errors.As(err, &te) || errors.Is(err, fsutil.ErrBadTar) {
			return res, agentproto.Errorf(agentproto.CodeInvalid, "%v", err)
		}
		return res, fsError(err)
	}
	return res, nil
}

// TarGet checks that req.Path is a directory and returns what writes its
// tree as a tar stream: names relative to it, symlinks as themselves,
// hard links once.
func (a *Agent) TarGet(ctx context.Context, req agentproto.TarGetRequest) (func(io.Writer) error, error) {
	dir, err := a.resolve(req.Path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fsError(err)
	}
	if !fi.IsDir() {
		return nil, agentproto.Errorf(agentproto.CodeInvalid, "%s is not a directory: get a file with the files call", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fsError(err)
	}
	return func(w io.Writer) error {
		defer root.Close()
		bw := bufio.NewWriterSize(w, agentproto.ChunkSize)
		tw := tar.NewWriter(bw)
		if err := fsutil.WriteTar(ctx, root, tw); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return bw.Flush()
	}, nil
}
