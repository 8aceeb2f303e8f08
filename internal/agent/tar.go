package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// TarPut extracts a tar stream into a directory, made with its parents if
// missing. Every name is opened through an os.Root of the directory, so
// no entry reaches outside it, through ".." or a symlink; entries that
// would are refused by name, as are absolute names. Device nodes, FIFOs
// and sockets are skipped and counted. Modes and modification times are
// kept; every entry is owned by the call's user. What came before a
// refused entry stays written.
func (a *Agent) TarPut(ctx context.Context, req agentproto.TarPutRequest, r io.Reader) (agentproto.TarResult, error) {
	var res agentproto.TarResult
	dir, err := a.resolve(req.Path)
	if err != nil {
		return res, err
	}
	acct, err := lookupUser(req.User)
	if err != nil {
		return res, err
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return res, agentproto.Errorf(agentproto.CodeInvalid, "%s is not a directory: name the directory to extract into", dir)
	}
	if err := acct.mkdirAll(dir); err != nil {
		return res, fsError(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return res, fsError(err)
	}
	defer root.Close()
	x := &extractor{root: root, dir: dir, acct: acct}
	if err := x.run(ctx, tar.NewReader(ctxReader{ctx, r})); err != nil {
		// Read the rest, as the protocol asks, unless the stream itself failed.
		io.Copy(io.Discard, r)
		return x.res, err
	}
	return x.res, nil
}

// extractor extracts one tar stream under root.
type extractor struct {
	root *os.Root
	dir  string
	acct *account
	res  agentproto.TarResult
	// dirs are the directories' modes and times, set once their content is
	// written (writing into a directory changes its time).
	dirs []dirMeta
}

type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (x *extractor) run(ctx context.Context, tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return agentproto.Errorf(agentproto.CodeInvalid, "read the tar stream: %v", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if err := x.entry(hdr, name, tr); err != nil {
			return err
		}
	}
	// Deepest first, so that a read-only directory is made so after its
	// children's times are set.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chmod(d.name, d.mode); err != nil {
			return x.fail(d.name, err)
		}
		x.root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return nil
}

// entryName checks a tar entry's name and cleans it: absolute names and
// ones with a ".." element are refused.
func entryName(name string) (string, error) {
	if path.IsAbs(name) {
		return "", agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q has an absolute name: archive paths relative to the directory", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q has a '..' element: archive paths inside the directory", name)
		}
	}
	if strings.ContainsRune(name, 0) {
		return "", agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q contains a NUL byte", name)
	}
	return path.Clean(name), nil
}

// entry writes one entry.
func (x *extractor) entry(hdr *tar.Header, name string, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil // pax global header (git archive writes one): no file
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		x.res.Skipped++
		return nil
	}
	mode := fileMode(uint32(hdr.Mode) & 0o7777)
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q names the directory itself but is not a directory", hdr.Name)
		}
		x.dirs = append(x.dirs, dirMeta{name: ".", mode: mode, mtime: hdr.ModTime})
		return nil
	}
	if err := x.mkdirs(hdr.Name, path.Dir(name)); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(name, mode, hdr.ModTime)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return x.file(name, mode, hdr.ModTime, r)
	case tar.TypeSymlink:
		if err := x.clear(name); err != nil {
			return err
		}
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return x.fail(name, err)
		}
		x.res.Symlinks++
		return x.fail(name, x.chown(name))
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil {
			return agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q: hard link to %q outside the directory", hdr.Name, hdr.Linkname)
		}
		if err := x.clear(name); err != nil {
			return err
		}
		if err := x.root.Link(target, name); err != nil {
			return x.fail(name, err)
		}
		x.res.Links++
		return nil
	}
	return agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q has type %q, which cove does not extract", hdr.Name, hdr.Typeflag)
}

// mkdirs makes the missing directories up to name, owned by the call's
// user, for the tar entry entry.
func (x *extractor) mkdirs(entry, name string) error {
	if name == "." {
		return nil
	}
	fi, err := x.root.Lstat(name)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err := x.mkdirs(entry, path.Dir(name)); err != nil {
		return err
	}
	if err := x.root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return x.fail(entry, err)
	}
	if fi, err := x.root.Lstat(name); err != nil || !fi.IsDir() {
		return agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q: %s is a symlink or a file, not a directory, and entries are never written through one", entry, name)
	}
	x.res.Dirs++
	return x.fail(name, x.chown(name))
}

func (x *extractor) mkdir(name string, mode fs.FileMode, mtime time.Time) error {
	fi, err := x.root.Lstat(name)
	switch {
	case err == nil && !fi.IsDir():
		if err := x.clear(name); err != nil {
			return err
		}
		fallthrough
	case err != nil:
		if err := x.root.Mkdir(name, 0o700); err != nil {
			return x.fail(name, err)
		}
		x.res.Dirs++
		if err := x.chown(name); err != nil {
			return x.fail(name, err)
		}
	}
	x.dirs = append(x.dirs, dirMeta{name: name, mode: mode, mtime: mtime})
	return nil
}

// file writes a regular file, replacing what is there; a symlink there is
// replaced, never written through.
func (x *extractor) file(name string, mode fs.FileMode, mtime time.Time, r io.Reader) error {
	if err := x.clear(name); err != nil {
		return err
	}
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return x.fail(name, err)
	}
	n, err := io.Copy(f, r)
	x.res.Bytes += n
	if err == nil {
		err = x.chown(name)
	}
	if err == nil {
		err = f.Chmod(mode) // after the chown, which clears set-id bits
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return x.fail(name, err)
	}
	x.root.Chtimes(name, mtime, mtime)
	x.res.Files++
	return nil
}

// clear removes a non-directory at name, so that an entry replaces it
// rather than writes through it.
func (x *extractor) clear(name string) error {
	fi, err := x.root.Lstat(name)
	if err != nil || fi.IsDir() {
		return nil
	}
	return x.fail(name, x.root.Remove(name))
}

func (x *extractor) chown(name string) error {
	if x.acct == nil {
		return nil
	}
	return x.root.Lchown(name, int(x.acct.uid), int(x.acct.gid))
}

// fail describes err, met at entry name. os.Root's refusal of a name that
// escapes it becomes a refusal of the entry.
func (x *extractor) fail(name string, err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "path escapes from parent") || errors.Is(err, syscall.ELOOP) {
		return agentproto.Errorf(agentproto.CodeInvalid, "tar entry %q would be written outside %s (through a symlink): nothing is written there", name, x.dir)
	}
	return fsError(fmt.Errorf("tar entry %q: %w", name, err))
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
		if err := writeTree(ctx, root, tw); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return bw.Flush()
	}, nil
}

// writeTree writes root's tree to tw in lexical order.
func writeTree(ctx context.Context, root *os.Root, tw *tar.Writer) error {
	links := map[[2]uint64]string{} // first name of each multiply linked file
	return fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while the walk ran
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		return writeEntry(root, tw, name, fi, links)
	})
}

func writeEntry(root *os.Root, tw *tar.Writer, name string, fi fs.FileInfo, links map[[2]uint64]string) error {
	var target string
	if fi.Mode()&fs.ModeSymlink != 0 {
		t, err := root.Readlink(name)
		if err != nil {
			return nil
		}
		target = t
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() && target == "" {
		return nil // devices, FIFOs, sockets: nothing to carry
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := links[key]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			return tw.WriteHeader(hdr)
		}
		links[key] = name
	}
	if !fi.Mode().IsRegular() {
		return tw.WriteHeader(hdr)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil // removed since the walk saw it
	}
	defer f.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// A file that changes size while it is read is padded or cut to the
	// size in its header, as GNU tar does.
	n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
	if err != nil {
		return err
	}
	if n < hdr.Size {
		_, err = io.CopyN(tw, zeroReader{}, hdr.Size-n)
	}
	return err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
