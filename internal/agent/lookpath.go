package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// errNotFound reports a command missing from PATH.
var errNotFound = errors.New("command not found")

// lookPath finds file the way a shell does, but in the command's own PATH
// and relative to its own directory, not the agent's: exec.LookPath would
// use the agent's environment and working directory.
func lookPath(file, pathEnv, dir string) (string, error) {
	if strings.Contains(file, "/") {
		// Returned as given: a relative name runs relative to dir, and the
		// program sees the name it was called by, as from a shell.
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return file, executable(p)
	}
	err := errNotFound
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			continue // an empty entry means ".", which is not searched on purpose
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, file)
		switch e := executable(p); {
		case e == nil:
			return p, nil
		case errors.Is(e, fs.ErrPermission):
			err = e // like a shell: found but not runnable, unless a later entry is
		}
	}
	return "", err
}

// executable reports whether p names a file that can be run.
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return &fs.PathError{Op: "exec", Path: p, Err: fs.ErrPermission}
	}
	return nil
}
