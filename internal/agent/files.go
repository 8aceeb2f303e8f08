package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/fsutil"
)

// Put writes a file atomically: the content goes to a temporary file in
// the same directory, which is synced and renamed over the target. A
// symlink at the target is replaced, not written through. The answer
// carries the content's SHA-256, hashed as it is written.
func (a *Agent) Put(ctx context.Context, req agentproto.PutRequest, r io.Reader) (agentproto.FileInfo, error) {
	var info agentproto.FileInfo
	p, mode, err := a.resolveMode(req.Path, req.Mode, 0o644)
	if err != nil {
		return info, err
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return info, agentproto.Errorf(agentproto.CodeIsDir, "%s is a directory", p)
	}
	acct, err := lookupUser(req.User)
	if err != nil {
		return info, err
	}
	dir := filepath.Dir(p)
	if err := acct.mkdirAll(dir); err != nil {
		return info, fsError(err)
	}
	// The name does not include the target's: that could exceed NAME_MAX.
	f, err := os.CreateTemp(dir, ".cove-put-*")
	if err != nil {
		return info, fsError(err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	sum := sha256.New()
	if err := copyBlocks(io.MultiWriter(f, sum), fsutil.ContextReader{Ctx: ctx, R: r}); err != nil {
		return info, fsError(fmt.Errorf("write %s: %w", p, err))
	}
	if err := acct.chown(tmp); err != nil {
		return info, fsError(err)
	}
	if err := f.Chmod(fileMode(mode)); err != nil {
		return info, fsError(err)
	}
	if err := f.Sync(); err != nil {
		return info, fsError(err)
	}
	if err := f.Close(); err != nil {
		return info, fsError(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return info, fsError(err)
	}
	done = true
	syncDir(dir)
	fi, err := os.Lstat(p)
	if err != nil {
		return info, fsError(err)
	}
	info = fileInfo(p, fi)
	info.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return info, nil
}

// putBlock is the size of an upload's writes to disk: under gVisor each
// write is a trip into the sandbox's kernel, and io.Copy's 32 KiB made a
// GiB take 32768 of them.
const putBlock = 1 << 20

// copyBlocks copies r to w in writes of putBlock bytes, the last excepted.
func copyBlocks(w io.Writer, r io.Reader) error {
	buf := make([]byte, putBlock)
	for {
		n, err := agentproto.Fill(r, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// syncDir makes a rename in dir durable. Some file systems refuse to sync
// a directory; the file's content is synced either way, so that is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Get opens a regular file for reading, following symlinks.
func (a *Agent) Get(ctx context.Context, req agentproto.GetRequest) (agentproto.FileInfo, io.ReadCloser, error) {
	var info agentproto.FileInfo
	p, err := a.resolve(req.Path)
	if err != nil {
		return info, nil, err
	}
	// Check before opening: opening a FIFO would block.
	fi, err := os.Stat(p)
	if err != nil {
		return info, nil, fsError(err)
	}
	if err := checkRegular(p, fi); err != nil {
		return info, nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return info, nil, fsError(err)
	}
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return info, nil, fsError(err)
	}
	if err := checkRegular(p, fi); err != nil { // replaced since the Stat
		f.Close()
		return info, nil, err
	}
	if req.Offset == 0 && req.Length == 0 {
		return fileInfo(p, fi), f, nil
	}
	if req.Offset < 0 || req.Length < 0 || req.Offset > fi.Size() {
		f.Close()
		return info, nil, agentproto.Errorf(agentproto.CodeInvalid, "range offset %d length %d is outside %s (%d bytes)", req.Offset, req.Length, p, fi.Size())
	}
	if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
		f.Close()
		return info, nil, fsError(err)
	}
	return fileInfo(p, fi), readCloser{io.LimitReader(f, req.Span(fi.Size())), f}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

func checkRegular(p string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return agentproto.Errorf(agentproto.CodeIsDir, "%s is a directory", p)
	case !fi.Mode().IsRegular():
		return agentproto.Errorf(agentproto.CodeInvalid, "%s is not a regular file", p)
	}
	return nil
}

// errListFull stops a listing at agentproto.MaxListEntries.
var errListFull = errors.New("listing full")

// List lists the tree under a directory, depth first, each directory's
// entries in lexical order. Symlinks inside the tree are not followed; a
// symlink named by the request itself is, like `find -H`. A file is listed
// as itself.
func (a *Agent) List(ctx context.Context, req agentproto.ListRequest) (agentproto.ListResult, error) {
	var res agentproto.ListResult
	p, err := a.resolve(req.Path)
	if err != nil {
		return res, err
	}
	if req.Depth < 0 {
		return res, agentproto.Errorf(agentproto.CodeInvalid, "depth must not be negative")
	}
	depth := max(req.Depth, 1)
	fi, err := os.Lstat(p)
	if err != nil {
		return res, fsError(err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err := os.Stat(p); err == nil && target.IsDir() {
			fi = target
		}
	}
	if !fi.IsDir() {
		res.Entries = []agentproto.FileInfo{fileInfo(p, fi)}
		return res, nil
	}
	l := &lister{ctx: ctx, entries: []agentproto.FileInfo{}}
	switch err := l.walk(p, depth); {
	case errors.Is(err, errListFull):
		res.Truncated = true
	case err != nil:
		return res, fsError(err)
	}
	res.Entries = l.entries
	return res, nil
}

type lister struct {
	ctx     context.Context
	entries []agentproto.FileInfo
}

// walk appends the entries under dir, descending depth-1 more levels.
func (l *lister) walk(dir string, depth int) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue // removed since the ReadDir
		}
		if len(l.entries) == agentproto.MaxListEntries {
			return errListFull
		}
		p := filepath.Join(dir, e.Name())
		l.entries = append(l.entries, fileInfo(p, fi))
		if e.IsDir() && depth > 1 {
			// An unreadable subdirectory is listed without its contents
			// rather than failing the whole listing.
			if err := l.walk(p, depth-1); err != nil && (errors.Is(err, errListFull) || l.ctx.Err() != nil) {
				return err
			}
		}
	}
	return nil
}

// fileInfo describes fi, found at p, without following symlinks.
func fileInfo(p string, fi fs.FileInfo) agentproto.FileInfo {
	info := agentproto.FileInfo{
		Path:      p,
		Type:      "other",
		Size:      fi.Size(),
		Mode:      permBits(fi.Mode()),
		MtimeUnix: fi.ModTime().Unix(),
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		info.Type = "file"
	case m.IsDir():
		info.Type = "dir"
	case m&fs.ModeSymlink != 0:
		info.Type = "symlink"
		info.Target, _ = os.Readlink(p)
	}
	return info
}

// permBits turns an fs.FileMode into Unix permission bits, 07777.
func permBits(m fs.FileMode) uint32 {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

// fileMode is the inverse of permBits.
func fileMode(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
