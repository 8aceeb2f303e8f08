package agent

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// account is a user a command runs as, or a file is written for, read from
// the sandbox's own /etc/passwd and /etc/group (os/user without cgo).
type account struct {
	name   string
	home   string
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary groups
}

// lookupUser resolves name; "" is the agent's own user, root, and gives
// nil: commands and files stay as they always were.
func lookupUser(name string) (*account, error) {
	if name == "" {
		return nil, nil
	}
	if err := agentproto.CheckUser(name); err != nil {
		return nil, err
	}
	u, err := user.Lookup(name)
	if err != nil {
		if errors.As(err, new(user.UnknownUserError)) {
			return nil, agentproto.Errorf(agentproto.CodeInvalid, "no user %s in the sandbox", name)
		}
		return nil, fmt.Errorf("look up user %s: %w", name, err)
	}
	a := &account{name: u.Username, home: u.HomeDir}
	if a.uid, err = parseID(u.Uid); err != nil {
		return nil, fmt.Errorf("user %s: uid: %w", name, err)
	}
	if a.gid, err = parseID(u.Gid); err != nil {
		return nil, fmt.Errorf("user %s: gid: %w", name, err)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of user %s: %w", name, err)
	}
	for _, g := range gids {
		id, err := parseID(g)
		if err != nil {
			return nil, fmt.Errorf("user %s: group %q: %w", name, g, err)
		}
		a.groups = append(a.groups, id)
	}
	return a, nil
}

func parseID(s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	return uint32(id), err
}

// credential is what a process started as a runs with; nil keeps the
// agent's own.
func (a *account) credential() *syscall.Credential {
	if a == nil {
		return nil
	}
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

// env is what a process started as a adds to the default environment: a
// login's HOME, USER and LOGNAME.
func (a *account) env() []string {
	if a == nil {
		return nil
	}
	return []string{"HOME=" + a.home, "USER=" + a.name, "LOGNAME=" + a.name}
}

// chown gives path to a; nil leaves it root's.
func (a *account) chown(path string) error {
	if a == nil {
		return nil
	}
	return os.Lchown(path, int(a.uid), int(a.gid))
}

// mkdirAll is os.MkdirAll, but the directories it makes are a's: a file
// written for a user lands in directories that user can use.
func (a *account) mkdirAll(dir string) error {
	if a == nil {
		return os.MkdirAll(dir, 0o755)
	}
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range made {
		if err := a.chown(d); err != nil {
			return err
		}
	}
	return nil
}
