package image

// Images imported from OCI: an OCI image layout (a directory or a tar of
// one), a `docker save` archive, or a registry reference. The layers are
// unpacked into a rootfs in the store's own layout (<name>-<key12>/rootfs,
// manifest.json, <name>.current), cove's guest files and cove-agent are
// added, and with VM the QEMU backend's artifacts are made as for a built
// image, so that both backends boot it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// DefaultImportMaxBytes bounds what an import writes: the archive it
// spools and the content its layers unpack to, each.
const DefaultImportMaxBytes int64 = 16 << 30

// ErrBadImage means the archive or the image in it cannot be imported: not
// an image, corrupt, truncated, or a layer with an entry that escapes the
// root. Its message names the entry.
var ErrBadImage = errors.New("bad image")

// ImportOptions configures Import. Exactly one of Archive, Reader and Ref
// names the image.
type ImportOptions struct {
	Name    string // image name; required
	Archive string // host path: OCI layout directory or tar, or `docker save` tar
	Ref     string // registry reference, e.g. docker.io/library/alpine:3.20
	// Reader is the archive's bytes (an API upload): spooled into the
	// store, within MaxBytes, then read as Archive.
	Reader   io.Reader
	Agent    string    // host path of the static cove-agent binary; required
	VM       bool      // also make the QEMU backend's artifacts
	Progress io.Writer // human-readable progress lines; nil for none
	// MaxBytes bounds the spooled archive and the unpacked content (0:
	// DefaultImportMaxBytes).
	MaxBytes    int64
	VMKernelDeb string       // as BuildOptions.VMKernelDeb
	Logger      *slog.Logger // nil for none
}

// ImageConfig is what an imported image's OCI config says about running
// it (templates use Env and WorkingDir).
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Import imports the OCI image o names into the store dir as image
// o.Name, makes it the name's current image and returns it. Importing the
// same image with the same agent again only makes it current. A failed
// import leaves nothing behind. Errors name the store "the image store",
// never its host path.
func Import(ctx context.Context, dir string, o ImportOptions) (Image, error) {
	img, err := importImage(ctx, dir, o)
	if err != nil {
		return Image{}, scrubPath(fmt.Errorf("import image %s: %w", o.Name, err), dir)
	}
	return img, nil
}

func importImage(ctx context.Context, dir string, o ImportOptions) (Image, error) {
	if err := checkName(o.Name); err != nil {
		return Image{}, err
	}
	n := 0
	for _, set := range []bool{o.Archive != "", o.Ref != "", o.Reader != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Image{}, errors.New("give one of an archive and a registry reference")
	}
	if o.Agent == "" {
		return Image{}, errors.New("no agent binary given")
	}
	agent, err := os.ReadFile(o.Agent)
	if err != nil {
		return Image{}, fmt.Errorf("read agent: %w", err)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultImportMaxBytes
	}
	b := &builder{opts: BuildOptions{Dir: dir, Name: o.Name, VM: o.VM, VMKernelDeb: o.VMKernelDeb},
		prog: &progress{w: o.Progress}, log: o.Logger}
	if b.prog.w == nil {
		b.prog.w = io.Discard
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, err
	}
	if o.Reader != nil {
		sp, release, err := newSpool(dir)
		if err != nil {
			return Image{}, err
		}
		defer release()
		p := filepath.Join(sp, "upload")
		if err := spool(ctx, b, p, o.Reader, o.MaxBytes); err != nil {
			return Image{}, err
		}
		o.Reader, o.Archive = nil, p
	}
	unlock, err := lockDir(ctx, dir, func() { b.prog.printf("import: waiting for another build to finish") })
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	if err := errors.Join(removeStale(dir), removeDeadSpools(dir)); err != nil {
		return Image{}, fmt.Errorf("remove stale builds: %w", err)
	}
	work, err := os.MkdirTemp(dir, tmpPrefix+"import-")
	if err != nil {
		return Image{}, err
	}
	defer removeTree(work)
	src, err := openSource(ctx, b, work, o)
	if err != nil {
		return Image{}, err
	}
	return b.importFrom(ctx, src, o, agent)
}

// importFrom makes (or finds) the image of src.
func (b *builder) importFrom(ctx context.Context, src source, o ImportOptions, agent []byte) (Image, error) {
	start := time.Now()
	digest, err := src.img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("%w: manifest: %v", ErrBadImage, err)
	}
	cfg, err := src.img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("%w: config: %v", ErrBadImage, err)
	}
	if err := checkPlatform(cfg); err != nil {
		return Image{}, err
	}
	key := importKey(digest.String(), agent)
	id := o.Name + "-" + key[:12]
	dir := b.opts.Dir
	img, err := load(dir, id)
	made := false
	switch {
	case err == nil:
		b.prog.printf("import: %s is up to date", id)
	case errors.Is(err, ErrNotFound):
		made = true
		b.prog.printf("import: %s from %s (%s)", id, src.desc, digest)
		m := Manifest{ID: id, Name: o.Name, Key: key, AgentSHA256: sha256Hex(agent), Source: src.desc,
			Digest: digest.String(), Config: imageConfig(cfg)}
		if img, err = b.makeImported(ctx, src.img, m, agent, o.MaxBytes); err != nil {
			return Image{}, err
		}
	default:
		return Image{}, err
	}
	// The VM artifacts before the name moves: a failed import leaves the
	// name as it was, and no image that QEMU cannot boot.
	if b.opts.VM {
		if err := b.ensureVM(ctx, img); err != nil {
			if made {
				// Renamed first, so that a half-removed image is never seen as one.
				tmp := filepath.Join(dir, tmpPrefix+"rm-"+id)
				if rerr := errors.Join(os.Rename(img.Dir, tmp), removeTree(tmp)); rerr != nil {
					b.log.Warn("remove the image of a failed import", "id", id, "err", rerr)
				}
			}
			return Image{}, err
		}
	}
	if err := setCurrent(dir, o.Name, id); err != nil {
		return Image{}, err
	}
	img.Current = true
	b.prog.printf("import: %s ready in %.1fs, %s", id, time.Since(start).Seconds(), humanize.IBytes(uint64(img.Manifest.SizeBytes)))
	b.log.Info("image imported", "id", id, "source", src.desc, "elapsed", time.Since(start))
	return img, nil
}

// checkPlatform refuses an image for another OS or CPU than cove's guests.
func checkPlatform(cfg *v1.ConfigFile) error {
	if cfg.OS != "" && cfg.OS != "linux" {
		return fmt.Errorf("%w: the image is for %s, not linux", ErrBadImage, cfg.OS)
	}
	if cfg.Architecture != "" && cfg.Architecture != "amd64" {
		return fmt.Errorf("%w: the image is for %s, not amd64", ErrBadImage, cfg.Architecture)
	}
	return nil
}

func imageConfig(cfg *v1.ConfigFile) *ImageConfig {
	c := cfg.Config
	return &ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
}

// importKey is the content address of an imported image: the OCI
// manifest's digest plus what cove adds (as imageKey).
func importKey(digest string, agent []byte) string {
	layer, err := json.Marshal(layerFiles())
	if err != nil {
		panic("image: marshal layer: " + err.Error()) // plain data; cannot fail
	}
	h := sha256.New()
	h.Write([]byte("cove-oci-image\x00" + importVersion + "\x00" + digest + "\x00" + vmInitVersion + "\x00"))
	h.Write(layer)
	h.Write([]byte{0})
	h.Write(userLayerKey())
	h.Write([]byte{0})
	h.Write(agent)
	return hex.EncodeToString(h.Sum(nil))
}

// importVersion changes whenever what an import adds to the layers does.
const importVersion = "1"

// makeImported unpacks img's layers and cove's additions, and publishes
// the result as image m.ID.
func (b *builder) makeImported(ctx context.Context, img v1.Image, m Manifest, agent []byte, maxBytes int64) (Image, error) {
	return b.publishNew(m, func(rootfs string) (Manifest, error) {
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return m, err
		}
		if err := b.unpackLayers(ctx, img, rootfs, maxBytes); err != nil {
			return m, err
		}
		if err := addCoveFiles(rootfs, agent); err != nil {
			return m, err
		}
		m.Debian, m.Packages = importedPackages(rootfs)
		return m, nil
	})
}

// unpackLayers extracts img's layers in order into rootfs, applying each
// one's whiteouts to those below, with owners, modes and xattrs as the
// layers say, and no more than maxBytes of content in all.
func (b *builder) unpackLayers(ctx context.Context, img v1.Image, rootfs string, maxBytes int64) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("%w: layers: %v", ErrBadImage, err)
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	var total int64
	for i, l := range layers {
		d, _ := l.Digest()
		size, _ := l.Size()
		label := fmt.Sprintf("import: layer %d/%d", i+1, len(layers))
		b.prog.printf("%s %.19s (%s compressed) ...", label, d.String(), humanize.IBytes(uint64(size)))
		var st fsutil.TarStats
		var counts fsutil.LayerCounts
		t0 := time.Now()
		rc, err := l.Uncompressed()
		if err != nil {
			return layerError(i+1, err)
		}
		cr := &countingReader{r: rc}
		err = b.withByteProgress(label+" unpacking", cr, func() error {
			var err error
			st, err = fsutil.ExtractTarOptions(ctx, root, cr, fsutil.TarOptions{
				KeepOwners: true, Whiteouts: true, Xattrs: true,
				MaxBytes: maxBytes - total, RootName: "the image's root", Counts: &counts,
			})
			return err
		})
		rc.Close()
		total += st.Bytes
		if err != nil {
			return layerError(i+1, err)
		}
		b.prog.printf("%s: %d files, %d directories, %d whiteouts, %s, in %.1fs", label,
			st.Files, st.Dirs, counts.Whiteouts, humanize.IBytes(uint64(st.Bytes)), time.Since(t0).Seconds())
	}
	return nil
}

// layerError describes a layer that could not be unpacked: a refused
// entry, a size past the bound, or a corrupt or truncated stream.
func layerError(n int, err error) error {
	var te *fsutil.TarEntryError
	switch {
	case errors.As(err, &te), errors.Is(err, fsutil.ErrBadTar):
		return fmt.Errorf("%w: layer %d: %w", ErrBadImage, n, err)
	case errors.Is(err, fsutil.ErrTooLarge):
		return fmt.Errorf("layer %d: %w", n, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	// The compressed stream's own errors (gzip, digest) are the image's.
	if strings.Contains(err.Error(), "gzip") || strings.Contains(err.Error(), "unexpected EOF") ||
		strings.Contains(err.Error(), "digest") || strings.Contains(err.Error(), "zstd") {
		return fmt.Errorf("%w: layer %d: %v", ErrBadImage, n, err)
	}
	return fmt.Errorf("layer %d: %w", n, err)
}

// ScrubPath keeps dir, a host path, out of err's message (as Import's
// errors do), for an answer to a remote client.
func ScrubPath(err error, dir string) error { return scrubPath(err, dir) }

// scrubPath keeps dir, a host path, out of err's message; errors.Is and
// errors.As still see through it.
func scrubPath(err error, dir string) error {
	if dir == "" || !strings.Contains(err.Error(), dir) {
		return err
	}
	return &scrubbed{err: err, dir: dir}
}

type scrubbed struct {
	err error
	dir string
}

func (s *scrubbed) Error() string { return strings.ReplaceAll(s.err.Error(), s.dir, "<image store>") }
func (s *scrubbed) Unwrap() error { return s.err }
