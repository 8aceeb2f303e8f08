package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	h, err := r.openSandbox(ctx, id)
	if errors.Is(err, os.ErrProcessDone) {
		return exitOf(id), nil
	}
	if err != nil {
		return runtime.Exit{}, err
	}
	defer h.Close()
	if err := h.Wait(ctx); err != nil {
		return runtime.Exit{}, err
	}
	return exitOf(id), nil
}

// openSandbox opens the sandbox process of sandbox id, or returns
// os.ErrProcessDone if it has exited.
func (r *Runtime) openSandbox(ctx context.Context, id string) (*proc.Handle, error) {
	out, err := r.runscCmd(ctx, "--root", r.root, "state", id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if bytes.Contains(out, []byte("does not exist")) || bytes.Contains(out, []byte("not found")) {
			// runsc holds nothing: a sandbox that never got going, or one
			// whose state went with it.
			if _, serr := os.Stat(r.sandboxDir(id)); serr == nil {
				return nil, os.ErrProcessDone
			}
			return nil, fmt.Errorf("gvisor: sandbox %s: %w", id, runtime.ErrNotFound)
		}
		return nil, fmt.Errorf("gvisor: runsc state: %w: %s", err, bytes.TrimSpace(out))
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("gvisor: runsc state: %w", err)
	}
	if st.Status == "stopped" || st.Pid <= 0 {
		return nil, os.ErrProcessDone
	}
	h, err := proc.Open(st.Pid)
	if err != nil {
		return nil, err
	}
	// The pid is runsc's record, which may be older than the process now
	// holding it: the sandbox's own names its runsc root and its id.
	if args, err := proc.Cmdline(st.Pid); err != nil || !containsArg(args, r.root) || !containsID(args, id) {
		h.Close()
		return nil, os.ErrProcessDone
	}
	return h, nil
}

// exitOf says how sandbox id ended, from what its cgroups counted.
func exitOf(id string) runtime.Exit {
	return runtime.Exit{OOMKilled: cgroup.OOMKills(cgroup.Dirs(id)...) > 0}
}
