package image

// Where an import's image comes from: an archive on the host or uploaded,
// read with go-containerregistry as an OCI layout or a `docker save`
// tarball, or a registry.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/dustin/go-humanize"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// guestPlatform is the only platform cove's guests run.
var guestPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

// source is an opened image and how the manifest records where it came
// from.
type source struct {
	img  v1.Image
	desc string
}

// openSource opens the image o names (an upload is spooled by now, as
// Archive). work is a scratch directory for an unpacked layout tar.
func openSource(ctx context.Context, b *builder, work string, o ImportOptions) (source, error) {
	switch {
	case o.Ref != "":
		return openRef(ctx, b, o.Ref)
	}
	fi, err := os.Stat(o.Archive)
	if err != nil {
		return source{}, fmt.Errorf("archive: %w", err)
	}
	if fi.IsDir() {
		img, err := layoutImage(o.Archive)
		if err != nil {
			return source{}, err
		}
		return source{img: img, desc: "oci-layout " + o.Archive}, nil
	}
	return openArchive(ctx, b, work, o.Archive, filepath.Base(o.Archive), o.MaxBytes)
}

// spool copies r to the new file p, refusing more than max bytes.
func spool(ctx context.Context, b *builder, p string, r io.Reader, max int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	cr := &countingReader{r: io.LimitReader(fsutil.ContextReader{Ctx: ctx, R: r}, max+1)}
	var n int64
	err = b.withByteProgress("import: receiving the archive", cr, func() error {
		var err error
		n, err = io.Copy(f, cr)
		return err
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receive archive: %w", err)
	}
	if n > max {
		return fmt.Errorf("receive archive: %w (%s)", fsutil.ErrTooLarge, humanize.IBytes(uint64(max)))
	}
	b.prog.printf("import: received %s", humanize.IBytes(uint64(n)))
	return nil
}

// openArchive opens the tar at p: a `docker save` archive (manifest.json)
// or a tar of an OCI layout (index.json). label names it in the manifest.
func openArchive(ctx context.Context, b *builder, work, p, label string, max int64) (source, error) {
	names, digest, err := scanTar(ctx, p)
	if err != nil {
		return source{}, err
	}
	desc := fmt.Sprintf("archive %s sha256:%s", label, digest)
	switch {
	case names["manifest.json"]:
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return source{}, fmt.Errorf("%w: docker save archive: %v", ErrBadImage, err)
		}
		return source{img: img, desc: desc}, nil
	case names["index.json"]:
		dir := filepath.Join(work, "layout")
		if err := unpackLayout(ctx, p, dir, max); err != nil {
			return source{}, err
		}
		b.prog.printf("import: unpacked the OCI layout")
		img, err := layoutImage(dir)
		if err != nil {
			return source{}, err
		}
		return source{img: img, desc: desc}, nil
	}
	return source{}, fmt.Errorf("%w: the archive has neither manifest.json (docker save) nor index.json (OCI layout)", ErrBadImage)
}

// scanTar reads the tar at p through, returning its top-level names and
// its sha256: a corrupt or truncated archive fails here, before anything
// is unpacked.
func scanTar(ctx context.Context, p string) (map[string]bool, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, "", fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(fsutil.ContextReader{Ctx: ctx, R: f}, h))
	names := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			return nil, "", fmt.Errorf("%w: not a valid tar archive (corrupt or truncated): %v", ErrBadImage, err)
		}
		names[path.Clean(hdr.Name)] = true
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return nil, "", fmt.Errorf("%w: archive entry %q is truncated: %v", ErrBadImage, hdr.Name, err)
		}
	}
	io.Copy(h, f) // the padding after the end marker
	if !endMarker(f) {
		return nil, "", fmt.Errorf("%w: the archive is truncated: it has no end-of-archive marker", ErrBadImage)
	}
	return names, hex.EncodeToString(h.Sum(nil)), nil
}

// endMarker reports whether f ends in the two zero blocks every tar
// writer ends an archive with: archive/tar takes a stream cut between two
// entries for a complete one.
func endMarker(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Size() < 1024 {
		return false
	}
	tail := make([]byte, 1024)
	if _, err := f.ReadAt(tail, fi.Size()-1024); err != nil {
		return false
	}
	return bytes.Count(tail, []byte{0}) == len(tail)
}

// unpackLayout extracts the OCI layout tar at p into dir, within max.
func unpackLayout(ctx context.Context, p, dir string, max int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	_, err = fsutil.ExtractTarOptions(ctx, root, f, fsutil.TarOptions{MaxBytes: max, RootName: "the layout"})
	var te *fsutil.TarEntryError
	if errors.As(err, &te) || errors.Is(err, fsutil.ErrBadTar) {
		return fmt.Errorf("%w: OCI layout: %w", ErrBadImage, err)
	}
	return err
}

// layoutImage picks the linux/amd64 image of the OCI layout at dir.
func layoutImage(dir string) (v1.Image, error) {
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrBadImage, err)
	}
	img, err := pickImage(ii, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrBadImage, err)
	}
	return img, nil
}

// pickImage returns the first image of ii for guestPlatform (or with no
// platform named), looking into nested indexes.
func pickImage(ii v1.ImageIndex, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, errors.New("indexes nested too deep")
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && !d.Platform.Satisfies(guestPlatform) {
			continue
		}
		switch {
		case d.MediaType.IsIndex():
			child, err := ii.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := pickImage(child, depth+1); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage():
			return ii.Image(d.Digest)
		}
	}
	return nil, errors.New("no linux/amd64 image in the index")
}

// openRef opens a registry's image, with the host's registry credentials
// (docker's config.json) if it has any.
func openRef(ctx context.Context, b *builder, ref string) (source, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return source{}, fmt.Errorf("%w: reference %q: %v", ErrBadImage, ref, err)
	}
	b.prog.printf("import: pulling %s", r.Name())
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(guestPlatform),
		remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return source{}, fmt.Errorf("pull %s: %w", r.Name(), err)
	}
	return source{img: img, desc: "ref " + r.Name()}, nil
}
