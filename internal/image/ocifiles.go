package image

// What an import adds to an OCI image's layers: the files and directories
// every cove image has (recipe.go, layerFiles), the guest user, and
// cove-agent, which both backends run as the sandbox's init.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// addCoveFiles adds cove's files to the unpacked rootfs. The layers are
// untrusted: no directory that the additions go into may be a symlink,
// which could point into the host when the host writes through it.
func addCoveFiles(rootfs string, agent []byte) error {
	r := defaultRecipe()
	u := defaultUser()
	dirs := []string{"/etc", "/etc/sudoers.d", "/etc/skel", u.Home, filepath.Dir(AgentPath)}
	for _, d := range r.Dirs {
		dirs = append(dirs, d.Path)
	}
	for _, d := range dirs {
		if err := checkNoSymlink(rootfs, d); err != nil {
			return err
		}
	}
	// The account databases are read and rewritten: one that is a symlink
	// would copy what it points to on the host into the guest.
	for _, p := range []string{"/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"} {
		if fi, err := os.Lstat(filepath.Join(rootfs, p)); err == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file in the image", ErrBadImage, p)
		}
	}
	for _, d := range r.Dirs {
		if err := makeGuestDir(rootfs, d.Path, d.Mode); err != nil {
			return fmt.Errorf("make %s: %w", d.Path, err)
		}
	}
	files := layerFiles()
	files["/etc/machine-id"] = r.Files["/etc/machine-id"] // no two sandboxes share one
	for _, p := range []string{"/etc/hostname", "/etc/hosts"} {
		if _, err := os.Lstat(filepath.Join(rootfs, p)); errors.Is(err, fs.ErrNotExist) {
			files[p] = r.Files[p]
		}
	}
	for p, content := range files {
		if err := writeGuestFile(rootfs, p, content, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	if err := installAgent(rootfs, agent); err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	has, err := hasAccount(rootfs, u.Name)
	if err != nil {
		return err
	}
	if !has {
		if err := addUser(rootfs, u); err != nil {
			return fmt.Errorf("user: %w", err)
		}
	}
	return nil
}

// checkNoSymlink refuses guest path p if it or a directory above it is a
// symlink in rootfs. A missing component ends the check: it is made anew.
func checkNoSymlink(rootfs, p string) error {
	cur := ""
	for _, el := range strings.Split(strings.Trim(path.Clean(p), "/"), "/") {
		cur += "/" + el
		fi, err := os.Lstat(filepath.Join(rootfs, cur))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: %s is a symlink in the image: cove writes there and does not follow it", ErrBadImage, cur)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory in the image", ErrBadImage, cur)
		}
	}
	return nil
}

// hasAccount reports whether rootfs's /etc/passwd has an account name.
func hasAccount(rootfs, name string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name+":") {
			return true, nil
		}
	}
	return false, sc.Err()
}

// guestRegular reports whether guest path p is a regular file reached
// through no symlink: safe for the host to read.
func guestRegular(rootfs, p string) bool {
	if checkNoSymlink(rootfs, path.Dir(p)) != nil {
		return false
	}
	fi, err := os.Lstat(filepath.Join(rootfs, p))
	return err == nil && fi.Mode().IsRegular()
}

// importedPackages is packageVersions for an untrusted rootfs: files that
// are not plainly there are not read.
func importedPackages(rootfs string) (debian string, pkgs map[string]string) {
	if !guestRegular(rootfs, "/etc/debian_version") || !guestRegular(rootfs, "/var/lib/dpkg/status") {
		return "", nil
	}
	return packageVersions(rootfs)
}
