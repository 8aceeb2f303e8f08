package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/dustin/go-humanize"
)

// BuildOptions configures Build.
type BuildOptions struct {
	Dir       string       // image store; default DefaultDir
	Name      string       // image name; default DefaultName
	AgentPath string       // host path of the (static) cove-agent binary; required
	Mirror    string       // Debian mirror URL; default DetectMirror
	Progress  io.Writer    // human-readable stages; nil for none
	Verbose   bool         // also copy debootstrap and apt output to Progress
	Logger    *slog.Logger // nil for none
	// VM also makes the QEMU backend's artifacts (vm.go): kernel, initrd
	// and ext4 disk. VMKernelDeb, if set, is the kernel .deb to use
	// instead of the pinned one (pinnedKernel).
	VM          bool
	VMKernelDeb string
	// VMSmoke, if set, boots new VM artifacts before they are published
	// (qemu.SmokeBoot: the agent must answer a ping). If it fails, nothing
	// is published and the name's current image stays what it was.
	VMSmoke func(ctx context.Context, vf VMFiles) error

	// buildBase populates a base rootfs; tests replace debootstrap.
	buildBase baseFunc
}

// baseFunc fills rootfs (an empty directory) with the packages of r,
// writing command output to out.
type baseFunc func(ctx context.Context, b *builder, r recipe, rootfs string, out *outputSink) error

type builder struct {
	opts BuildOptions
	prog *progress
	log  *slog.Logger
}

// Build builds the image for opts.AgentPath on the current base, makes it
// the current image of opts.Name and returns it. If that image exists
// already, Build only makes it current. A build that fails or is
// cancelled cleans up after itself; one that is killed leaves a .tmp-
// directory, which the next build removes. Builds sharing a Dir take
// turns (flock on Dir/.lock).
func Build(ctx context.Context, opts BuildOptions) (Image, error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.buildBase == nil {
		opts.buildBase = debootstrapBase
	}
	if err := checkName(opts.Name); err != nil {
		return Image{}, err
	}
	if opts.AgentPath == "" {
		return Image{}, errors.New("build image: no agent binary given")
	}
	b := &builder{opts: opts, prog: &progress{w: opts.Progress}, log: opts.Logger}
	if b.prog.w == nil {
		b.prog.w = io.Discard
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	img, err := b.build(ctx)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", opts.Name, err)
	}
	return img, nil
}

func (b *builder) build(ctx context.Context) (Image, error) {
	start := time.Now()
	dir := b.opts.Dir
	agent, err := os.ReadFile(b.opts.AgentPath)
	if err != nil {
		return Image{}, fmt.Errorf("read agent: %w", err)
	}
	if len(agent) == 0 {
		return Image{}, fmt.Errorf("agent %s is empty", b.opts.AgentPath)
	}
	r := defaultRecipe()
	baseKey := r.key()
	key := imageKey(baseKey, agent)
	id := b.opts.Name + "-" + key[:12]

	if err := os.MkdirAll(filepath.Join(dir, "base"), 0o755); err != nil {
		return Image{}, err
	}
	unlock, err := lockDir(ctx, dir, func() {
		b.prog.printf("image: waiting for another build to finish (%s)", filepath.Join(dir, ".lock"))
	})
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	// Holding the lock, any .tmp- entry belongs to a dead build.
	if err := errors.Join(removeStale(dir), removeStale(filepath.Join(dir, "base"))); err != nil {
		return Image{}, fmt.Errorf("remove stale builds: %w", err)
	}

	img, err := load(dir, id)
	switch {
	case err == nil:
		// The VM artifacts before the name moves: an image QEMU cannot
		// boot never becomes current.
		if b.opts.VM {
			if err := b.ensureVM(ctx, img); err != nil {
				return Image{}, err
			}
		}
		if err := setCurrent(dir, b.opts.Name, id); err != nil {
			return Image{}, err
		}
		img.Current = true
		b.prog.printf("image: %s is up to date", id)
		b.log.Info("image up to date", "id", id)
		return img, nil
	case !errors.Is(err, ErrNotFound):
		return Image{}, err
	}

	b.prog.printf("image: building %s (agent %s, sha256 %.12s)", id, b.opts.AgentPath, sha256Hex(agent))
	baseRoot, err := b.ensureBase(ctx, r, baseKey)
	if err != nil {
		return Image{}, err
	}
	img, err = b.makeImage(ctx, baseRoot, Manifest{
		ID:          id,
		Name:        b.opts.Name,
		Key:         key,
		BaseKey:     baseKey,
		Suite:       r.Suite,
		AgentSHA256: sha256Hex(agent),
	}, agent)
	if err != nil {
		return Image{}, err
	}
	if b.opts.VM {
		if err := b.ensureVM(ctx, img); err != nil {
			// The image stays, not current: the next build finds it
			// and tries its VM artifacts again.
			return Image{}, err
		}
	}
	if err := setCurrent(dir, b.opts.Name, id); err != nil {
		return Image{}, err
	}
	img.Current = true
	b.prog.printf("image: %s ready in %.1fs: %s, %s", id, time.Since(start).Seconds(), img.Rootfs, humanize.IBytes(uint64(img.Manifest.SizeBytes)))
	b.log.Info("image built", "id", id, "rootfs", img.Rootfs, "size", img.Manifest.SizeBytes, "elapsed", time.Since(start))
	return img, nil
}

// ensureBase returns the rootfs of the base with key, building it first
// if it is not cached.
func (b *builder) ensureBase(ctx context.Context, r recipe, key string) (string, error) {
	baseDir := filepath.Join(b.opts.Dir, "base")
	final := filepath.Join(baseDir, key)
	if fi, err := os.Stat(filepath.Join(final, "rootfs")); err == nil && fi.IsDir() {
		b.prog.printf("base: %.12s cached", key)
		return filepath.Join(final, "rootfs"), nil
	}

	start := time.Now()
	tmp, err := os.MkdirTemp(baseDir, tmpPrefix+key[:12]+"-")
	if err != nil {
		return "", err
	}
	published := false
	defer func() {
		if !published {
			if err := removeTree(tmp); err != nil {
				b.log.Warn("clean up failed base build", "dir", tmp, "err", err)
			}
		}
	}()
	logPath := filepath.Join(tmp, "build.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	out := &outputSink{log: logf, verbose: b.opts.Verbose}
	if b.opts.Verbose {
		out.prog = b.prog
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return "", err
	}
	b.prog.printf("base: building %.12s: Debian %s + %s (takes 1-2 minutes)", key, r.Suite, strings.Join(r.Packages, " "))
	b.log.Info("building base", "key", key, "dir", tmp)
	if err := b.opts.buildBase(ctx, b, r, rootfs, out); err != nil {
		// Keep the log: the temporary directory goes away.
		failed := filepath.Join(baseDir, "failed-build.log")
		if os.Rename(logPath, failed) == nil {
			err = fmt.Errorf("%w (full log: %s)", err, failed)
		}
		return "", fmt.Errorf("base: %w", err)
	}
	if err := finishBase(r, rootfs); err != nil {
		return "", fmt.Errorf("base: %w", err)
	}
	if err := publish(tmp, final); err != nil {
		return "", fmt.Errorf("base: %w", err)
	}
	published = true
	size, _ := treeSize(filepath.Join(final, "rootfs"))
	b.prog.printf("base: %.12s built in %.1fs, %s", key, time.Since(start).Seconds(), humanize.IBytes(uint64(size)))
	b.log.Info("base built", "key", key, "size", size, "elapsed", time.Since(start))
	return filepath.Join(final, "rootfs"), nil
}

// makeImage publishes base + agent as image m.ID.
func (b *builder) makeImage(ctx context.Context, baseRoot string, m Manifest, agent []byte) (Image, error) {
	return b.publishNew(m, func(rootfs string) (Manifest, error) {
		out := &outputSink{log: io.Discard}
		err := b.prog.step("image: hard-link copy of the base", nil, func() error {
			// Hard links, not copies: images share the base's blocks and the
			// copy takes a second. Safe because nobody writes to a rootfs.
			return run(ctx, out, "", "cp", "-a", "-l", "--", baseRoot, rootfs)
		})
		if err != nil {
			return m, err
		}
		if err := installAgent(rootfs, agent); err != nil {
			return m, fmt.Errorf("install agent: %w", err)
		}
		for p, content := range layerFiles() {
			// A new inode: rootfs shares the base's by hard link.
			if err := writeGuestFile(rootfs, p, content, 0o644); err != nil {
				return m, fmt.Errorf("write %s: %w", p, err)
			}
		}
		if err := addUser(rootfs, defaultUser()); err != nil {
			return m, fmt.Errorf("user: %w", err)
		}
		m.Debian, m.Packages = packageVersions(rootfs)
		return m, nil
	})
}

// publishNew makes image m.ID in a temporary directory of the store, fill
// writing its rootfs (not yet there) and completing its manifest, and
// publishes it; on error nothing is left.
func (b *builder) publishNew(m Manifest, fill func(rootfs string) (Manifest, error)) (Image, error) {
	dir := b.opts.Dir
	tmp, err := os.MkdirTemp(dir, tmpPrefix+m.ID+"-")
	if err != nil {
		return Image{}, err
	}
	img, err := func() (Image, error) {
		m, err := fill(filepath.Join(tmp, "rootfs"))
		if err != nil {
			return Image{}, err
		}
		return publishImage(dir, tmp, m)
	}()
	if err != nil {
		if rerr := removeTree(tmp); rerr != nil {
			b.log.Warn("clean up a failed image", "dir", tmp, "err", rerr)
		}
	}
	return img, err
}

// publishImage writes m, with its time and size, into the finished build
// tmp and publishes it as image m.ID of dir.
func publishImage(dir, tmp string, m Manifest) (Image, error) {
	var err error
	m.Created = time.Now().UTC().Truncate(time.Second)
	if m.SizeBytes, err = treeSize(filepath.Join(tmp, "rootfs")); err != nil {
		return Image{}, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Image{}, err
	}
	if err := fsutil.WriteFile(filepath.Join(tmp, "manifest.json"), append(data, '\n'), 0o644); err != nil {
		return Image{}, err
	}
	final := filepath.Join(dir, m.ID)
	if err := publish(tmp, final); err != nil {
		return Image{}, err
	}
	return Image{ID: m.ID, Name: m.Name, Dir: final, Rootfs: filepath.Join(final, "rootfs"), Manifest: m}, nil
}

// publish renames the finished build tmp to final, after flushing it to
// disk: after a crash, final is either absent or complete.
func publish(tmp, final string) error {
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return err
	}
	syscall.Sync()
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return fsutil.SyncDir(filepath.Dir(final))
}

// installAgent puts agent at AgentPath in rootfs as a new inode. rootfs
// is a hard-link copy of the base: writing through an existing link would
// change the base and every other image made from it.
func installAgent(rootfs string, agent []byte) error {
	path := filepath.Join(rootfs, AgentPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".cove-agent-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(agent); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o755); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// packageVersions reads the Debian release and the installed versions of
// the headline packages from rootfs. Missing information is left out: the
// manifest is informative.
func packageVersions(rootfs string) (debian string, pkgs map[string]string) {
	if b, err := os.ReadFile(filepath.Join(rootfs, "etc/debian_version")); err == nil {
		debian = strings.TrimSpace(string(b))
	}
	status, err := os.ReadFile(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		return debian, nil
	}
	want := []string{"python3", "python3-pip", "nodejs", "npm", "git", "curl"}
	for _, st := range deb822Stanzas(status) {
		name := st["package"]
		if !strings.HasSuffix(st["status"], " installed") {
			continue
		}
		if slices.Contains(want, name) {
			if pkgs == nil {
				pkgs = map[string]string{}
			}
			pkgs[name] = st["version"]
		}
	}
	return debian, pkgs
}
