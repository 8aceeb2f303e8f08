package fsutil

import (
	"archive/tar"
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
)

// ErrBadTar reports a stream that is not a valid tar archive.
var ErrBadTar = errors.New("not a valid tar stream")

// TarEntryError is an entry ExtractTar refuses: it would land outside the
// directory, or is of a kind not extracted.
type TarEntryError struct {
	Entry  string // its name in the archive
	Reason string
}

func (e *TarEntryError) Error() string { return fmt.Sprintf("tar entry %q %s", e.Entry, e.Reason) }

// Owner is who owns the entries ExtractTar makes.
type Owner struct{ UID, GID int }

// TarStats counts what ExtractTar wrote. Skipped are the device nodes,
// FIFOs and sockets it does not make.
type TarStats struct {
	Files    int64 `json:"files"`
	Dirs     int64 `json:"dirs"`
	Symlinks int64 `json:"symlinks"`
	Links    int64 `json:"links"` // hard links
	Skipped  int64 `json:"skipped"`
	Bytes    int64 `json:"bytes"` // of regular files' content
}

// ExtractTar extracts the tar stream r into root. Every name is opened
// through root, so no entry reaches outside it through ".." or a symlink;
// entries that would, and absolute names, are refused by name
// (*TarEntryError). A symlink or file already at an entry's name is
// replaced, never written through. Device nodes, FIFOs and sockets are
// skipped and counted; modes and modification times are kept; owner, if
// set, owns every new entry. What came before a refused entry stays
// written.
func ExtractTar(ctx context.Context, root *os.Root, r io.Reader, owner *Owner) (TarStats, error) {
	return ExtractTarOptions(ctx, root, r, TarOptions{Owner: owner})
}

// ExtractTarOptions is ExtractTar with the options of o (tarlayer.go):
// what an image layer needs beyond a plain archive.
func ExtractTarOptions(ctx context.Context, root *os.Root, r io.Reader, o TarOptions) (TarStats, error) {
	x := &extractor{root: root, owner: o.Owner, opts: o, counts: o.Counts}
	if x.counts == nil {
		x.counts = &LayerCounts{}
	}
	if o.Whiteouts {
		x.made = map[string]bool{}
	}
	err := x.run(tar.NewReader(ContextReader{ctx, r}))
	return x.res, err
}

// ContextReader is R that stops a copy once Ctx is done.
type ContextReader struct {
	Ctx context.Context
	R   io.Reader
}

func (r ContextReader) Read(p []byte) (int, error) {
	if err := r.Ctx.Err(); err != nil {
		return 0, err
	}
	return r.R.Read(p)
}

// extractor extracts one tar stream under root.
type extractor struct {
	root  *os.Root
	owner *Owner
	opts  TarOptions
	// made holds the names this stream wrote, when it applies whiteouts:
	// an opaque directory hides only what lower layers put there.
	made   map[string]bool
	counts *LayerCounts
	// lastDir is the directory the last entry was in, known to be one:
	// tar streams list a directory's files together.
	lastDir string
	res     TarStats
	// dirs are the directories' modes and times, set once their content is
	// written (writing into a directory changes its time).
	dirs []dirMeta
}

type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (x *extractor) run(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadTar, err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if done, err := x.whiteout(hdr, name); done || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if err := x.entry(hdr, name, tr); err != nil {
			return err
		}
		x.wrote(name)
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
		return "", &TarEntryError{Entry: name, Reason: "has an absolute name: archive paths relative to the directory"}
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", &TarEntryError{Entry: name, Reason: "has a '..' element: archive paths inside the directory"}
		}
	}
	if strings.ContainsRune(name, 0) {
		return "", &TarEntryError{Entry: name, Reason: "contains a NUL byte"}
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
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return &TarEntryError{Entry: hdr.Name, Reason: "names the directory itself but is not a directory"}
		}
		x.dirs = append(x.dirs, dirMeta{name: ".", mode: mode, mtime: hdr.ModTime})
		return nil
	}
	if err := x.mkdirs(hdr.Name, path.Dir(name)); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(name, mode, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return x.file(name, mode, hdr, r)
	case tar.TypeSymlink:
		if err := x.clear(name); err != nil {
			return err
		}
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return x.fail(name, err)
		}
		x.res.Symlinks++
		return x.fail(name, x.chownEntry(name, hdr))
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil {
			return &TarEntryError{Entry: hdr.Name, Reason: fmt.Sprintf("is a hard link to %q, outside the directory", hdr.Linkname)}
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
	return &TarEntryError{Entry: hdr.Name, Reason: fmt.Sprintf("has type %q, which is not extracted", hdr.Typeflag)}
}

// mkdirs makes the missing directories up to name, owned by the call's
// user, for the tar entry entry.
func (x *extractor) mkdirs(entry, name string) error {
	if name == "." || name == x.lastDir {
		return nil
	}
	fi, err := x.root.Lstat(name)
	if err == nil && fi.IsDir() {
		x.lastDir = name
		return nil
	}
	if err := x.mkdirs(entry, path.Dir(name)); err != nil {
		return err
	}
	if err := x.root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return x.fail(entry, err)
	}
	if fi, err := x.root.Lstat(name); err != nil || !fi.IsDir() {
		return &TarEntryError{Entry: entry, Reason: fmt.Sprintf("is under %s, a symlink or a file, not a directory: entries are never written through one", name)}
	}
	x.res.Dirs++
	return x.fail(name, x.chown(name))
}

func (x *extractor) mkdir(name string, mode fs.FileMode, hdr *tar.Header) error {
	mtime := hdr.ModTime
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
	if err := x.dirMeta(name, hdr); err != nil {
		return x.fail(name, err)
	}
	x.dirs = append(x.dirs, dirMeta{name: name, mode: mode, mtime: mtime})
	return nil
}

// file writes a regular file, replacing what is there; a symlink there is
// replaced, never written through.
func (x *extractor) file(name string, mode fs.FileMode, hdr *tar.Header, r io.Reader) error {
	mtime := hdr.ModTime
	// O_EXCL never follows a symlink: what is there is cleared first.
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		if err := x.clear(name); err != nil {
			return err
		}
		f, err = x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return x.fail(name, err)
	}
	n, err := x.copyContent(f, r)
	x.res.Bytes += n
	if uid, gid, ok := x.ownerOf(hdr); err == nil && ok {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Chmod(mode) // after the chown, which clears set-id bits
	}
	if err == nil {
		err = x.setXattrs(f, hdr) // after the chown, which clears capabilities
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
	if x.owner == nil {
		return nil
	}
	return x.root.Lchown(name, x.owner.UID, x.owner.GID)
}

// fail describes err, met at entry name. os.Root's refusal of a name that
// escapes it becomes a refusal of the entry.
func (x *extractor) fail(name string, err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "path escapes from parent") || errors.Is(err, syscall.ELOOP) {
		return &TarEntryError{Entry: name, Reason: fmt.Sprintf("would be written outside %s, through a symlink: nothing is written there", x.rootName())}
	}
	return fmt.Errorf("tar entry %q: %w", name, err)
}

// WriteTar writes root's tree to tw in lexical order: names relative to
// it (directories with a trailing slash), symlinks as themselves, a file
// with several names once and then as hard links to its first. Device
// nodes, FIFOs and sockets are left out. A file that changes size while
// it is read is cut or padded to its size when seen, as GNU tar does.
func WriteTar(ctx context.Context, root *os.Root, tw *tar.Writer) error {
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
