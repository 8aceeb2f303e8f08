// Package ocigen writes small OCI images from tar entries given in code:
// for the import's tests, the e2e suite and the import benchmark, which
// need images with known layers and no registry.
package ocigen

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// Entry is one entry of a layer: a header and, for a regular file, its
// content (Hdr.Size is set from it).
type Entry struct {
	Hdr  tar.Header
	Body []byte
}

// File, Dir, Symlink and Whiteout are shorthands for entries.
func File(name string, mode int64, uid, gid int, body string) Entry {
	return Entry{Hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Uid: uid, Gid: gid}, Body: []byte(body)}
}

func Dir(name string, mode int64, uid, gid int) Entry {
	return Entry{Hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: gid}}
}

func Symlink(name, target string) Entry {
	return Entry{Hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}

// Whiteout deletes guest path dir/base of a lower layer.
func Whiteout(dir, base string) Entry {
	return File(dir+"/.wh."+base, 0o644, 0, 0, "")
}

// LayerTar is the uncompressed tar of entries.
func LayerTar(entries []Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if h.Format == tar.FormatUnknown && len(h.PAXRecords) > 0 {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("entry %s: %w", h.Name, err)
		}
		if _, err := tw.Write(e.Body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image is an image of the given layers (each a tar from LayerTar, stored
// gzipped), for linux/amd64, with config c.
func Image(c v1.Config, layers ...[]byte) (v1.Image, error) {
	img := empty.Image
	for _, l := range layers {
		data := l
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", c
	return mutate.ConfigFile(img, cf)
}

// WriteDockerSave writes img as a `docker save` archive to path.
func WriteDockerSave(path string, img v1.Image) error {
	tag, err := name.NewTag("cove.test/image:latest")
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// WriteLayoutTar writes img as an OCI image layout, in a tar, to w.
func WriteLayoutTar(ctx context.Context, w io.Writer, img v1.Image) error {
	dir, err := os.MkdirTemp("", "ocigen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	if err := fsutil.WriteTar(ctx, root, tw); err != nil {
		return err
	}
	return tw.Close()
}
