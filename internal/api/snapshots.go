package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/cove-sandbox/cove/internal/outtext"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func snapshotInfo(i sandbox.SnapshotInfo) apitype.SnapshotInfo {
	return apitype.SnapshotInfo{
		Tag: i.Tag, CreatedAtUnix: i.CreatedAt.Unix(), BranchedFrom: i.BranchedFrom, Parent: i.Parent,
		Depth: i.Depth, Backend: i.Backend, Image: i.Image, CPUs: i.CPUs, MemoryMiB: i.MemoryMiB, DiskMiB: i.DiskMiB, Pids: i.Pids,
		SizeBytes: i.SizeBytes, PoolSize: i.PoolSize, PoolReady: i.PoolReady, Children: i.Children,
		RuntimeVersion: i.RuntimeVersion, Network: apitype.NetworkPolicy(i.Network),
	}
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req apitype.CreateSnapshotRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	pool := -1
	if req.PoolSize != nil {
		if pool = *req.PoolSize; pool < 0 {
			s.fail(w, r, fmt.Errorf("%w: pool_size must not be negative", sandbox.ErrInvalid))
			return
		}
	}
	o := sandbox.BuildOptions{
		Tag: req.Tag, Image: req.Image, Warm: req.Warm, CPUs: req.CPUs, MemoryMiB: req.MemoryMiB,
		DiskMiB: req.DiskMiB, Pids: req.Pids, PoolSize: pool, Network: policy(req.Network),
	}
	if headerHas(r.Header, "Accept", apitype.ContentTypeNDJSON) {
		st := &buildStream{w: w}
		o.Output = st
		info, err := s.svc.BuildSnapshot(r.Context(), o)
		s.endStream(w, r, st, info, err)
		return
	}
	info, err := s.svc.BuildSnapshot(r.Context(), o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo(info))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	infos := s.svc.Snapshots(r.Context())
	out := make([]apitype.SnapshotInfo, len(infos))
	for i, info := range infos {
		out[i] = snapshotInfo(info)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.Snapshot(r.Context(), r.PathValue("tag"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotInfo(info))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteSnapshot(r.Context(), r.PathValue("tag")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// branch serves both /branch and /snapshot: the latter is a branch that
// spawns no children.
func (s *Server) branch(withChildren bool) func(http.ResponseWriter, *http.Request, *sandbox.Sandbox) {
	return func(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
		var req apitype.BranchRequest
		if err := decode(w, r, &req, true); err != nil {
			s.fail(w, r, err)
			return
		}
		if !withChildren && req.N != 0 {
			s.fail(w, r, fmt.Errorf("%w: snapshot takes no n: use /branch to spawn children", sandbox.ErrInvalid))
			return
		}
		res, err := sb.Branch(r.Context(), sandbox.BranchOptions{
			Tag: req.Tag, N: req.N, TTL: ttl(req.TTLSecs), Network: policy(req.Network),
			Labels: req.Labels, User: req.User, Env: req.Env, Cwd: req.Cwd,
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out := apitype.BranchResponse{
			SnapshotInfo: snapshotInfo(res.Snapshot),
			PauseMs:      float64(res.Pause.Microseconds()) / 1000,
			StoppedMs:    float64(res.Stopped.Microseconds()) / 1000,
		}
		for _, c := range res.Children {
			out.Children = append(out.Children, s.sandboxInfo(c))
		}
		writeJSON(w, http.StatusCreated, out)
	}
}

// buildStream is the Output of a streamed snapshot build: each write of
// the warm command's output is sent at once as an NDJSON line. The answer
// starts (200) with the first line, so a build refused before any output,
// such as for a tag taken, still answers with its own status.
type buildStream struct {
	w http.ResponseWriter

	mu      sync.Mutex
	started bool
	ended   bool
	partial []byte // the start of a UTF-8 sequence that a write cut
	err     error  // of a write to the client
}

func (b *buildStream) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended || b.err != nil {
		return len(p), b.err
	}
	// Hold back an incomplete last character for the next write, so that
	// a character split across writes is not garbled.
	whole, rest := outtext.SplitRunes(append(b.partial, p...))
	b.partial = append([]byte(nil), rest...)
	if len(whole) > 0 {
		b.send(apitype.SnapshotBuildEvent{Output: string(whole)})
	}
	return len(p), b.err
}

// send writes one line and flushes it; b.mu is held.
func (b *buildStream) send(ev apitype.SnapshotBuildEvent) {
	if !b.started {
		b.started = true
		b.w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
		b.w.Header().Set("X-Content-Type-Options", "nosniff")
		b.w.WriteHeader(http.StatusOK)
	}
	line, _ := json.Marshal(ev) // of plain fields: cannot fail
	if _, err := b.w.Write(append(line, '\n')); err != nil {
		b.err = err
		return
	}
	if err := http.NewResponseController(b.w).Flush(); err != nil {
		b.err = err
	}
}

// endStream sends a streamed build's last line: the snapshot, or the error
// that ended the build; or, if no output was sent yet, a plain error answer
// with its status.
func (s *Server) endStream(w http.ResponseWriter, r *http.Request, b *buildStream, info sandbox.SnapshotInfo, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	if err != nil && !b.started {
		s.fail(w, r, err)
		return
	}
	if len(b.partial) > 0 {
		b.send(apitype.SnapshotBuildEvent{Output: string(b.partial)})
	}
	if err != nil {
		status, code := errStatus(err)
		s.logFailure(r, status, err)
		b.send(apitype.SnapshotBuildEvent{Error: &apitype.ErrorBody{Error: err.Error() + hint(err), Code: code}})
		return
	}
	si := snapshotInfo(info)
	b.send(apitype.SnapshotBuildEvent{Snapshot: &si})
}
