// Package image builds and finds the guest root filesystems that cove's
// sandboxes boot from.
//
// An image is a Debian rootfs plus the cove-agent binary. Images are
// versioned and immutable: each lives in its own directory named by its
// content, and a rebuild with the same inputs returns the existing one.
// Sandboxes never write to an image (runsc gets a copy-on-write overlay),
// which is what makes sharing files by hard link between images safe.
//
// Layout of an image directory (DefaultDir):
//
//	.lock                      build lock (flock)
//	base/<key>/rootfs          cached Debian rootfs, key = sha256(recipe)
//	base/<key>/build.log       debootstrap and apt output
//	<name>-<key12>/rootfs      image: base hard-linked + agent
//	<name>-<key12>/manifest.json
//	<name>.current             id of the newest image of that name
//	.tmp-*, base/.tmp-*        work in progress; removed by the next build
//	base/failed-build.log      the log of the last failed base build
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

const (
	// DefaultDir is where images live unless told otherwise.
	DefaultDir = "/var/lib/cove/images"
	// DefaultName is the image name used when none is given.
	DefaultName = "default"
)

var (
	// ErrNotFound means no image has the requested name or id.
	ErrNotFound = errors.New("image not found")
	// ErrCurrent means the image is its name's current image and so is
	// what new sandboxes get: it cannot be removed.
	ErrCurrent = errors.New("image is current")
	// ErrInvalidName means a name or id is not one an image can have.
	ErrInvalidName = errors.New("invalid image name or id")
	// ErrTooLarge means an import's archive or content is over its bound.
	ErrTooLarge = fsutil.ErrTooLarge
)

// Manifest describes a built image. It is written once, at build time.
type Manifest struct {
	ID          string            `json:"id"`   // <name>-<key12>
	Name        string            `json:"name"` // e.g. "default"
	Key         string            `json:"key"`  // sha256(base key, agent)
	BaseKey     string            `json:"base_key"`
	Suite       string            `json:"suite"`
	AgentSHA256 string            `json:"agent_sha256"`
	Created     time.Time         `json:"created"`
	SizeBytes   int64             `json:"size_bytes"`         // apparent size of the rootfs's files
	Debian      string            `json:"debian,omitempty"`   // /etc/debian_version
	Packages    map[string]string `json:"packages,omitempty"` // package -> installed version
	// Imported images (oci.go): where the image came from ("ref REF",
	// "archive NAME sha256:..."), its OCI manifest digest and its config.
	Source string       `json:"source,omitempty"`
	Digest string       `json:"digest,omitempty"`
	Config *ImageConfig `json:"config,omitempty"`
}

// Image is a built image on disk.
type Image struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Dir      string   `json:"dir"`    // the image's directory
	Rootfs   string   `json:"rootfs"` // Dir/rootfs: read-only for everyone
	Current  bool     `json:"current"`
	Manifest Manifest `json:"manifest"`
}

// namePattern keeps names and ids usable as single path elements, and
// away from the dot-files the store uses itself.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)

func checkName(s string) error {
	if !namePattern.MatchString(s) {
		return fmt.Errorf("%w %q", ErrInvalidName, s)
	}
	return nil
}

// Resolve finds an image by id, or by name via the name's current
// pointer. An empty nameOrID means DefaultName.
func Resolve(dir, nameOrID string) (Image, error) {
	if nameOrID == "" {
		nameOrID = DefaultName
	}
	if err := checkName(nameOrID); err != nil {
		return Image{}, err
	}
	img, err := load(dir, nameOrID)
	if !errors.Is(err, ErrNotFound) {
		return img, err
	}
	id, err := readCurrent(dir, nameOrID)
	if err != nil {
		return Image{}, err
	}
	return load(dir, id)
}

// List returns the images in dir, newest first. A missing dir has none.
func List(dir string) ([]Image, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var imgs []Image
	for _, e := range ents {
		if !e.IsDir() || checkName(e.Name()) != nil || e.Name() == "base" {
			continue
		}
		img, err := load(dir, e.Name())
		if errors.Is(err, ErrNotFound) {
			continue // not an image
		}
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	slices.SortFunc(imgs, func(a, b Image) int {
		if c := b.Manifest.Created.Compare(a.Manifest.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return imgs, nil
}

// Remove deletes image id. It refuses the current image of its name
// (ErrCurrent). Sandboxes still running from the image keep their open
// files but must not be restarted from it.
func Remove(ctx context.Context, dir, id string) error {
	if err := checkName(id); err != nil {
		return err
	}
	if _, err := load(dir, id); err != nil {
		return err // before locking: dir may not even exist
	}
	unlock, err := lockDir(ctx, dir, nil)
	if err != nil {
		return err
	}
	defer unlock()
	img, err := load(dir, id)
	if err != nil {
		return err
	}
	if img.Current {
		return fmt.Errorf("remove %s: %w (build another %q first)", id, ErrCurrent, img.Name)
	}
	// Rename first so that a half-removed image is never seen as one.
	tmp := filepath.Join(dir, tmpPrefix+"rm-"+id)
	if err := os.Rename(img.Dir, tmp); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	return removeTree(tmp)
}

// load reads image id in dir.
func load(dir, id string) (Image, error) {
	imgDir := filepath.Join(dir, id)
	data, err := os.ReadFile(filepath.Join(imgDir, "manifest.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("image %q in %s: %w", id, dir, ErrNotFound)
	}
	if err != nil {
		return Image{}, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Image{}, fmt.Errorf("image %s: bad manifest: %w", id, err)
	}
	if m.ID != id {
		return Image{}, fmt.Errorf("image %s: manifest names %q", id, m.ID)
	}
	img := Image{
		ID:       id,
		Name:     m.Name,
		Dir:      imgDir,
		Rootfs:   filepath.Join(imgDir, "rootfs"),
		Manifest: m,
	}
	if cur, err := readCurrent(dir, m.Name); err == nil && cur == id {
		img.Current = true
	}
	return img, nil
}

func currentPath(dir, name string) string { return filepath.Join(dir, name+".current") }

// readCurrent returns the id name's current pointer holds.
func readCurrent(dir, name string) (string, error) {
	data, err := os.ReadFile(currentPath(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("image %q in %s: %w", name, dir, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(data))
	if err := checkName(id); err != nil {
		return "", fmt.Errorf("%s: %w", currentPath(dir, name), err)
	}
	return id, nil
}

// setCurrent points name at id, atomically: the daemon may read it at any
// moment.
func setCurrent(dir, name, id string) error {
	if cur, err := readCurrent(dir, name); err == nil && cur == id {
		return nil
	}
	if err := fsutil.WriteFile(currentPath(dir, name), []byte(id+"\n"), 0o644); err != nil {
		return fmt.Errorf("set current %s: %w", name, err)
	}
	return nil
}
