package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/store"
)

// maxSandboxEnv bounds a sandbox's own environment, which every process
// started in it carries on top of its call's: a quarter of what one exec
// may pass, so calls keep most of the room.
const maxSandboxEnv = agentproto.MaxArgs / 4

// EnvList turns an environment given as a map into KEY=VALUE entries in
// key order, refusing names no process could be given.
func EnvList(env map[string]string) ([]string, error) {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, invalidf("env key %.64q: a name must be non-empty and have no '=' or NUL", k)
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// setRunEnv records o's environment and working directory in m where o
// gives them (an empty map clears the environment).
func setRunEnv(m *store.Meta, env map[string]string, cwd string) error {
	if env != nil {
		list, err := EnvList(env)
		if err != nil {
			return err
		}
		probe := agentproto.ExecRequest{Shell: "true", Env: list}
		if err := probe.Validate(); err != nil {
			return mapErr(err)
		}
		total := 0
		for _, kv := range list {
			total += len(kv) + 1
		}
		if total > maxSandboxEnv {
			return invalidf("env takes %d bytes, over the limit of %d for a sandbox's own environment", total, maxSandboxEnv)
		}
		m.EnvJSON = ""
		if len(list) > 0 {
			b, _ := json.Marshal(list) // strings: cannot fail
			m.EnvJSON = string(b)
		}
	}
	if cwd != "" {
		probe := agentproto.ExecRequest{Shell: "true", Cwd: cwd}
		if err := probe.Validate(); err != nil {
			return mapErr(err)
		}
		m.Cwd = cwd
	}
	return nil
}

// decodeEnv reads a stored environment; one that does not decode is none.
func decodeEnv(v string) []string {
	var l []string
	if v != "" {
		_ = json.Unmarshal([]byte(v), &l)
	}
	return l
}

// envMap is a stored environment as the API shows it.
func envMap(v string) map[string]string {
	l := decodeEnv(v)
	if len(l) == 0 {
		return nil
	}
	m := make(map[string]string, len(l))
	for _, kv := range l {
		k, val, _ := strings.Cut(kv, "=")
		m[k] = val
	}
	return m
}

// runDefaults is what a process started in b runs as, in and with, for a
// call that asked for user, cwd and env: the call's own user and cwd,
// else the sandbox's; the sandbox's environment with the call's on top
// (a later entry wins). Every call that starts a process (exec,
// background processes, terminals) goes through it.
func (b *box) runDefaults(user, cwd string, env []string) (string, string, []string) {
	b.mu.Lock()
	m := b.rec.Meta
	b.mu.Unlock()
	if cwd == "" {
		cwd = m.Cwd
	}
	if base := decodeEnv(m.EnvJSON); len(base) > 0 {
		env = append(base, env...)
	}
	return b.userOr(user), cwd, env
}

// checkMeta checks that a sandbox has m's default user and working
// directory.
func checkMeta(ctx context.Context, a *agentproto.Client, m store.Meta) error {
	if err := checkUser(ctx, a, m.User); err != nil {
		return err
	}
	return checkCwd(ctx, a, m.Cwd)
}

// checkCwd makes sure a sandbox's default working directory is a
// directory in it, so that a create naming a missing one fails whole
// rather than every exec after it.
func checkCwd(ctx context.Context, a *agentproto.Client, cwd string) error {
	if cwd == "" {
		return nil
	}
	if a == nil {
		return fmt.Errorf("%w: the sandbox's agent is not connected", ErrUnavailable)
	}
	fi, err := a.Stat(ctx, agentproto.StatRequest{Path: cwd})
	switch {
	case agentproto.CodeOf(err) == agentproto.CodeNotFound:
		return invalidf("cwd %s does not exist in the sandbox: make it in the image or snapshot, or give an existing directory", cwd)
	case err != nil:
		return fmt.Errorf("look up cwd %s: %w", cwd, mapErr(err))
	case fi.Type != "dir":
		return invalidf("cwd %s is a %s, not a directory", cwd, fi.Type)
	}
	return nil
}
