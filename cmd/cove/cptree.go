package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/pkg/client"
)

// parseCpDir parses the SRC and DST of `cove cp -r`: a directory's
// content goes into the other directory, made if missing.
func parseCpDir(src, dst string) (cpArgs, error) {
	sid, spath, sremote := splitRemote(src)
	did, dpath, dremote := splitRemote(dst)
	switch {
	case sremote && dremote:
		return cpArgs{}, errors.New("both SRC and DST are ID:DIR; copying between sandboxes is not supported, go through a local directory")
	case !sremote && !dremote:
		return cpArgs{}, errors.New("one of SRC and DST must be ID:DIR (write a local path that has a colon as ./NAME)")
	case src == "-" || dst == "-":
		return cpArgs{}, errors.New("cp -r copies directories, not standard input or output: pipe a tar stream through cove cp without -r")
	case sremote:
		if spath == "" {
			return cpArgs{}, fmt.Errorf("name the directory to copy: %s:DIR", sid)
		}
		return cpArgs{id: sid, remote: spath, local: dst}, nil
	default:
		if dpath == "" {
			return cpArgs{}, fmt.Errorf("name the directory to copy into: %s:DIR", did)
		}
		return cpArgs{upload: true, id: did, remote: dpath, local: src}, nil
	}
}

// uploadDir streams a.local's tree into the sandbox's directory as a tar
// stream made on the fly, drawing progress on stderr.
func uploadDir(ctx context.Context, cl *client.Client, tok string, a cpArgs, stderr io.Writer) (cpResult, error) {
	if fi, err := os.Stat(a.local); err != nil {
		return cpResult{}, err
	} else if !fi.IsDir() {
		return cpResult{}, fmt.Errorf("%s is not a directory: copy a file without -r", a.local)
	}
	root, err := os.OpenRoot(a.local)
	if err != nil {
		return cpResult{}, err
	}
	defer root.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		tw := tar.NewWriter(pw)
		err := fsutil.WriteTar(ctx, root, tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
		written <- err
	}()
	m := newMeter(-1)
	stop := m.draw(ctx, stderr)
	res, err := cl.PutTar(ctx, a.id, tok, a.remote, m.reader(pr), "")
	stop()
	pr.CloseWithError(errors.New("the upload ended")) // stops the writer if the daemon refused early
	werr := <-written
	if werr != nil && err == nil {
		err = fmt.Errorf("read %s: %w", a.local, werr)
	}
	if err != nil {
		return cpResult{}, notFoundIn(ctx, cl, err, a.id)
	}
	out := m.result("upload", a.id, a.remote, a.local)
	out.Files, out.Dirs, out.Skipped = res.Files, res.Dirs, res.Skipped
	return out, nil
}

// downloadDir extracts the sandbox directory's tar stream into a.local,
// made if missing, as it arrives; entries that would land outside a.local
// are refused.
func downloadDir(ctx context.Context, cl *client.Client, tok string, a cpArgs, stderr io.Writer) (cpResult, error) {
	body, err := cl.GetTar(ctx, a.id, tok, a.remote)
	if err != nil {
		return cpResult{}, notFoundIn(ctx, cl, err, a.id)
	}
	defer body.Close()
	if err := os.MkdirAll(a.local, 0o755); err != nil {
		return cpResult{}, err
	}
	root, err := os.OpenRoot(a.local)
	if err != nil {
		return cpResult{}, err
	}
	defer root.Close()
	m := newMeter(-1)
	stop := m.draw(ctx, stderr)
	st, err := fsutil.ExtractTar(ctx, root, m.reader(body), nil)
	stop()
	if err != nil {
		return cpResult{}, fmt.Errorf("download %s:%s into %s: %w", a.id, a.remote, a.local, err)
	}
	out := m.result("download", a.id, a.remote, a.local)
	out.Files, out.Dirs, out.Skipped = st.Files, st.Dirs, st.Skipped
	return out, nil
}
