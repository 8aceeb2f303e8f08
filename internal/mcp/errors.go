package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/cove-sandbox/cove/pkg/client"
)

// explain turns an error from the daemon into a tool error that tells the
// model what to do next. sandboxID, if set, is the sandbox the call was
// about: a "not found" is then checked against it, since it may mean the
// sandbox or something inside it, such as a file.
func (s *Server) explain(ctx context.Context, err error, sandboxID string) error {
	if err == nil {
		return nil
	}
	var opErr *net.OpError
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		return fmt.Errorf("the cove daemon refused this MCP server's API key (%v). This is a setup problem the user must fix: "+
			"the MCP server needs COVE_API_KEY set to the daemon's API key (the daemon writes it to /etc/cove/token)", err)
	case errors.Is(err, client.ErrForbidden):
		return fmt.Errorf("sandbox %s refused the sandbox token (%v). Pass the token that create_sandbox, spawn_sandboxes or branch_sandbox "+
			"returned for this sandbox as sandbox_token, or omit sandbox_token for sandboxes this session created", sandboxID, err)
	case errors.Is(err, client.ErrNotFound):
		if sandboxID != "" && s.sandboxGone(ctx, sandboxID) {
			return fmt.Errorf("sandbox %s does not exist: it may have expired or been killed. Call list_sandboxes to see the sandboxes alive, "+
				"or create_sandbox for a new one", sandboxID)
		}
		return fmt.Errorf("%v. Check the name or path (list_files shows what exists in a sandbox, list_snapshots the snapshots)", err)
	case errors.Is(err, client.ErrQuota):
		return fmt.Errorf("%v. This key's tenant is at its quota: kill sandboxes or delete snapshots you no longer need "+
			"(list_sandboxes, kill_sandbox), or ask with less (fewer sandboxes, cpus, memory or a shorter ttl_secs); get_usage shows what is left", err)
	case errors.Is(err, client.ErrLimit):
		return fmt.Errorf("%v. Kill sandboxes you no longer need (list_sandboxes, then kill_sandbox), or see get_usage for the limits", err)
	case errors.Is(err, client.ErrConflict):
		return fmt.Errorf("%v. Choose another name, or remove what is in the way first", err)
	case errors.Is(err, client.ErrNoSpace):
		return fmt.Errorf("%v. The daemon's disk is full: ask the user to free space on its host (delete snapshots, templates or checkpoints no longer needed), then call again", err)
	case errors.Is(err, client.ErrTooLarge):
		return fmt.Errorf("%v. Split the data into smaller pieces", err)
	case errors.Is(err, client.ErrBadRequest):
		return fmt.Errorf("%v. Fix the arguments and call again", err)
	case errors.Is(err, client.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timed out: %v. Give a larger timeout_secs, or run long work with exec_command background=true and wait_for_text on its log", err)
	case errors.Is(err, client.ErrGone):
		return fmt.Errorf("%v. The sandbox died and everything in it is gone: call create_sandbox for a new one "+
			"(list_sandboxes shows why it died as dead_reason)", err)
	case errors.Is(err, client.ErrUnavailable):
		return fmt.Errorf("%v. The daemon is busy or starting: try again in a few seconds", err)
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &opErr):
		return fmt.Errorf("cannot reach the cove daemon at %s (%v). This is a setup problem the user must fix: start the daemon "+
			"(`make up` or `cove serve`) or point COVE_URL at it", s.api.BaseURL(), err)
	}
	return err
}

// explainSpawn is explain for a call that spawns from snapshot tag, which
// a refused token means something else for.
func (s *Server) explainSpawn(ctx context.Context, err error, tag string) error {
	if errors.Is(err, client.ErrForbidden) {
		return fmt.Errorf("%v. Snapshot %s was saved from a sandbox, and spawning from it takes that sandbox's token: "+
			"this session remembers it for the snapshots it branched or saved; otherwise pass it as sandbox_token", err, tag)
	}
	return s.explain(ctx, err, "")
}

// sandboxGone reports whether the daemon says sandbox id does not exist.
func (s *Server) sandboxGone(ctx context.Context, id string) bool {
	_, err := s.apiOf(ctx).GetSandbox(ctx, id)
	return errors.Is(err, client.ErrNotFound)
}
