package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Wait implements runtime.Runtime. It watches the sandbox process runsc's
// state names by a pidfd: that process is the sandbox's kernel, so it ends
// when the sandbox's init does, when the host's OOM killer picks it, or
// when it is killed. The OOM killer is told apart by its count in the
// sandbox's memory cgroup, which runsc leaves until Destroy.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	if !runtime.ValidID(id) {
		return runtime.Exit{}, runtime.ErrNotFound
	}
	pid, err := r.sandboxPid(ctx, id)
	if err != nil {
		return runtime.Exit{}, err
	}
	// Its own command line names its runsc root and its id.
	mine := func(args []string) bool { return containsArg(args, r.root) && containsID(args, id) }
	if err := proc.Await(ctx, pid, mine); err != nil {
		return runtime.Exit{}, err
	}
	return runtime.Exit{OOMKilled: cgroup.OOMKills(cgroup.Dirs(id)...) > 0}, nil
}

// sandboxPid returns the pid of sandbox id's sandbox process as runsc
// records it, or 0 if it has stopped. The pid file, written by the launch,
// costs no runsc call; runsc state answers for a sandbox without one (a
// launch cut short, or an earlier daemon's sandbox).
func (r *Runtime) sandboxPid(ctx context.Context, id string) (int, error) {
	if pid := r.readPidFile(id); pid > 0 {
		return pid, nil
	}
	out, err := r.runscCmd(ctx, "--root", r.root, "state", id)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if bytes.Contains(out, []byte("does not exist")) || bytes.Contains(out, []byte("not found")) {
			// runsc holds nothing: a sandbox that never got going, or one
			// whose state went with it.
			if _, serr := os.Stat(r.sandboxDir(id)); serr == nil {
				return 0, nil
			}
			return 0, fmt.Errorf("gvisor: sandbox %s: %w", id, runtime.ErrNotFound)
		}
		return 0, fmt.Errorf("gvisor: runsc state: %w: %s", err, bytes.TrimSpace(out))
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("gvisor: runsc state: %w", err)
	}
	if st.Status == "stopped" {
		return 0, nil
	}
	return st.Pid, nil
}
