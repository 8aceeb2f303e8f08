package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// metaFlags are what create, spawn and branch tell about the sandboxes
// they make beyond resources: labels, default user, env and cwd.
type metaFlags struct {
	labels map[string]string
	env    map[string]string
	user   string
	cwd    string
}

// add adds --label, --user, --env and --cwd to fs; inherited says where
// sandboxes get them from when a flag is not given.
func (m *metaFlags) add(fs *pflag.FlagSet, inherited string) {
	m.labels, m.env = map[string]string{}, map[string]string{}
	addLabelFlag(fs, m.labels, "label the sandboxes (default: "+inherited+")")
	fs.StringVar(&m.user, "user", "", "account exec and cp run and write as by default: root or user (default: "+inherited+", else root)")
	addEnvFlag(fs, m.env, "set an environment variable of every process in the sandboxes")
	fs.StringVar(&m.cwd, "cwd", "", "working directory of every process in the sandboxes, an existing directory (default: "+inherited+", else /work)")
}

// values are the flags as the API takes them: nil maps where no flag was
// given, so that the sandboxes inherit.
func (m *metaFlags) values() (labels, env map[string]string, user, cwd string) {
	if len(m.labels) > 0 {
		labels = m.labels
	}
	if len(m.env) > 0 {
		env = m.env
	}
	return labels, env, m.user, m.cwd
}

// addEnvFlag adds a repeatable --env/-e K=V to fs, collected in env; K
// alone copies K from cove's own environment.
func addEnvFlag(fs *pflag.FlagSet, env map[string]string, usage string) {
	fs.FuncP("env", "e", usage+", `K=V` (K alone: copy it from here); repeatable", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if k == "" {
			return fmt.Errorf("want K=V, got %q", s)
		}
		if !ok {
			v = os.Getenv(k)
		}
		env[k] = v
		return nil
	})
}
