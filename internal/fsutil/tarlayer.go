package fsutil

// Options of ExtractTarOptions that unpacking an OCI image layer needs
// beyond a plain archive: its whiteouts, its owners and its xattrs, and a
// bound on what it writes.

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrTooLarge means an archive holds more content than its extraction
// allows (TarOptions.MaxBytes).
var ErrTooLarge = errors.New("archive content exceeds the size limit")

// OCI whiteout names (image-spec layer.md): ".wh.NAME" deletes NAME of a
// lower layer; ".wh..wh..opq" in a directory hides everything lower
// layers put in it.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// TarOptions configures ExtractTarOptions.
type TarOptions struct {
	// Owner, if set, owns every new entry (as ExtractTar's owner).
	Owner *Owner
	// KeepOwners gives each entry the uid and gid its header names. It
	// overrides Owner.
	KeepOwners bool
	// Whiteouts applies OCI whiteout entries to what is in root already
	// (the lower layers) instead of extracting them as files.
	Whiteouts bool
	// Xattrs sets the extended attributes (PAX SCHILY.xattr.*) of files and
	// directories. A filesystem without xattr support skips them.
	Xattrs bool
	// MaxBytes, if positive, bounds the content of the regular files
	// written (TarStats.Bytes counted across this call): past it, the
	// extraction stops with ErrTooLarge.
	MaxBytes int64
	// RootName is how errors name root ("" is root.Name()): a caller
	// answering a remote client keeps its host paths to itself.
	RootName string
	// Counts, if set, receives what the layer options did.
	Counts *LayerCounts
}

// LayerCounts counts the whiteouts applied and the xattrs the filesystem
// refused.
type LayerCounts struct {
	Whiteouts     int64
	XattrsSkipped int64
}

func (x *extractor) rootName() string {
	if x.opts.RootName != "" {
		return x.opts.RootName
	}
	return x.root.Name()
}

// wrote records that this stream made name and so its parents (for
// opaque directories).
func (x *extractor) wrote(name string) {
	if x.made == nil {
		return
	}
	for name != "." && name != "/" && !x.made[name] {
		x.made[name] = true
		name = path.Dir(name)
	}
}

// whiteout applies hdr if it is a whiteout entry and whiteouts are on:
// done reports that the entry was one and nothing more is to be written.
func (x *extractor) whiteout(hdr *tar.Header, name string) (done bool, err error) {
	if !x.opts.Whiteouts {
		return false, nil
	}
	dir, base := path.Split(name)
	if !strings.HasPrefix(base, whiteoutPrefix) {
		return false, nil
	}
	dir = path.Clean(dir)
	if fi, err := x.root.Lstat(dir); err != nil || !fi.IsDir() {
		return true, nil // nothing below to hide
	}
	if base == whiteoutOpaque {
		return true, x.opaque(hdr.Name, dir)
	}
	// The victim is a sibling of the entry: ".wh..." would name the
	// entry's own parent, which the ".." check of its name does not catch.
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." || strings.HasPrefix(target, whiteoutPrefix) {
		return true, &TarEntryError{Entry: hdr.Name, Reason: "is a whiteout of nothing"}
	}
	victim := path.Join(dir, target)
	if err := x.root.RemoveAll(victim); err != nil {
		return true, x.fail(hdr.Name, err)
	}
	x.counts.Whiteouts++
	return true, nil
}

// opaque removes what lower layers put in dir: everything there this
// stream did not write.
func (x *extractor) opaque(entry, dir string) error {
	f, err := x.root.Open(dir)
	if err != nil {
		return x.fail(entry, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return x.fail(entry, err)
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if x.made[p] {
			continue
		}
		if err := x.root.RemoveAll(p); err != nil {
			return x.fail(entry, err)
		}
	}
	x.counts.Whiteouts++
	return nil
}

// ownerOf is who should own the entry of hdr, if anyone in particular.
func (x *extractor) ownerOf(hdr *tar.Header) (uid, gid int, ok bool) {
	if x.opts.KeepOwners {
		return hdr.Uid, hdr.Gid, true
	}
	if x.owner != nil {
		return x.owner.UID, x.owner.GID, true
	}
	return 0, 0, false
}

// chownEntry gives name (not followed) the owner of hdr.
func (x *extractor) chownEntry(name string, hdr *tar.Header) error {
	uid, gid, ok := x.ownerOf(hdr)
	if !ok {
		return nil
	}
	return x.root.Lchown(name, uid, gid)
}

// dirMeta gives an extracted directory its header's owner and xattrs
// (its mode and time are set once its content is written).
func (x *extractor) dirMeta(name string, hdr *tar.Header) error {
	if x.opts.KeepOwners {
		if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if !x.opts.Xattrs || len(xattrsOf(hdr)) == 0 {
		return nil
	}
	f, err := x.root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return x.setXattrs(f, hdr)
}

// xattrsOf returns hdr's extended attributes.
func xattrsOf(hdr *tar.Header) map[string]string {
	var xa map[string]string
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if xa == nil {
				xa = map[string]string{}
			}
			xa[name] = v
		}
	}
	return xa
}

// setXattrs sets hdr's xattrs on the open file f.
func (x *extractor) setXattrs(f *os.File, hdr *tar.Header) error {
	if !x.opts.Xattrs {
		return nil
	}
	for name, v := range xattrsOf(hdr) {
		err := unix.Fsetxattr(int(f.Fd()), name, []byte(v), 0)
		if errors.Is(err, unix.ENOTSUP) {
			x.counts.XattrsSkipped++
			continue
		}
		if err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

// copyContent copies a file's content, within MaxBytes.
func (x *extractor) copyContent(w io.Writer, r io.Reader) (int64, error) {
	if x.opts.MaxBytes <= 0 {
		return io.Copy(w, r)
	}
	left := x.opts.MaxBytes - x.res.Bytes
	n, err := io.Copy(w, io.LimitReader(r, left+1))
	if err == nil && n > left {
		err = fmt.Errorf("%w (%d bytes)", ErrTooLarge, x.opts.MaxBytes)
	}
	return n, err
}
