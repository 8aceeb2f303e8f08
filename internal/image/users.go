package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// guestUser is the unprivileged account every image has beside root, as
// E2B's images do: commands run as it when a call or the sandbox asks.
type guestUser struct {
	Name  string `json:"name"`
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	Home  string `json:"home"`
	Shell string `json:"shell"`
	// Sudoers is /etc/sudoers.d/<Sudoers>: passwordless sudo.
	Sudoers string `json:"sudoers"`
}

func defaultUser() guestUser {
	return guestUser{Name: "user", UID: 1000, GID: 1000, Home: "/home/user", Shell: "/bin/bash", Sudoers: "cove-user"}
}

// userLayerKey is what the user layer contributes to the image key.
func userLayerKey() []byte {
	b, err := json.Marshal(defaultUser())
	if err != nil {
		panic("image: marshal user: " + err.Error()) // plain data; cannot fail
	}
	return b
}

// addUser makes u in rootfs: its lines in the account databases, its home
// (from /etc/skel) and its sudoers file. rootfs shares the base's inodes by
// hard link, so every file changed is written anew (writeLikeOld) and the
// base stays as it was. The work directory is given to u too: root passes
// any permission anyway, and u, like E2B's user in its home, may then
// create, rename and remove anything there.
func addUser(rootfs string, u guestUser) error {
	uid, gid := strconv.Itoa(u.UID), strconv.Itoa(u.GID)
	lines := map[string]string{
		"etc/passwd":  u.Name + ":x:" + uid + ":" + gid + "::" + u.Home + ":" + u.Shell + "\n",
		"etc/group":   u.Name + ":x:" + gid + ":\n",
		"etc/shadow":  u.Name + ":*:19000:0:99999:7:::\n",
		"etc/gshadow": u.Name + ":!::\n",
	}
	for p, line := range lines {
		if err := appendEntry(rootfs, p, u.Name, line); err != nil {
			return fmt.Errorf("add %s to %s: %w", u.Name, p, err)
		}
	}
	sudoers := u.Name + " ALL=(ALL:ALL) NOPASSWD: ALL\n"
	if err := writeGuestFile(rootfs, filepath.Join("/etc/sudoers.d", u.Sudoers), sudoers, 0o440); err != nil {
		return err
	}
	home := filepath.Join(rootfs, u.Home)
	if err := makeGuestDir(rootfs, u.Home, 0o750); err != nil {
		return err
	}
	if err := copySkel(filepath.Join(rootfs, "etc/skel"), home, u.UID, u.GID); err != nil {
		return fmt.Errorf("home of %s: %w", u.Name, err)
	}
	if err := os.Lchown(home, u.UID, u.GID); err != nil {
		return err
	}
	return os.Lchown(filepath.Join(rootfs, agentproto.WorkDir), u.UID, u.GID)
}

// appendEntry adds line to the account database rootfs/p (name: first
// field), refusing a name that is there already. A database the base lacks
// is made, root's and mode 0644 (0640 for the shadow files).
func appendEntry(rootfs, p, name, line string) error {
	path := filepath.Join(rootfs, p)
	old, err := os.ReadFile(path)
	mode, uid, gid := fs.FileMode(0o644), 0, 0
	if strings.HasSuffix(p, "shadow") {
		mode = 0o640
	}
	switch {
	case err == nil:
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		mode, uid, gid = fi.Mode().Perm(), int(st.Uid), int(st.Gid)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	content := string(old)
	for l := range strings.SplitSeq(content, "\n") {
		if strings.HasPrefix(l, name+":") {
			return fmt.Errorf("%s exists already", name)
		}
	}
	if content != "" && !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	if err := writeGuestFile(rootfs, p, content+line, mode); err != nil {
		return err
	}
	return os.Lchown(path, uid, gid)
}

// copySkel copies the regular files and directories of skel into home,
// owned by uid:gid. Symlinks are skipped: none is expected, and one could
// point into the host.
func copySkel(skel, home string, uid, gid int) error {
	err := filepath.WalkDir(skel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(skel, p)
		if err != nil || rel == "." {
			return err
		}
		dst := filepath.Join(home, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(dst, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		return os.Lchown(dst, uid, gid)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no skel: an empty home
	}
	return err
}
