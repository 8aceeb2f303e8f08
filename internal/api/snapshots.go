package api

import (
	"fmt"
	"net/http"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func snapshotInfo(i sandbox.SnapshotInfo) apitype.SnapshotInfo {
	return apitype.SnapshotInfo{
		Tag: i.Tag, CreatedAtUnix: i.CreatedAt.Unix(), BranchedFrom: i.BranchedFrom, Parent: i.Parent,
		Depth: i.Depth, Backend: i.Backend, Image: i.Image, CPUs: i.CPUs, MemoryMiB: i.MemoryMiB, DiskMiB: i.DiskMiB, Pids: i.Pids,
		SizeBytes: i.SizeBytes, PoolSize: i.PoolSize, PoolReady: i.PoolReady, Children: i.Children,
		RuntimeVersion: i.RuntimeVersion,
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
	info, err := s.svc.BuildSnapshot(r.Context(), sandbox.BuildOptions{
		Tag: req.Tag, Image: req.Image, Warm: req.Warm, CPUs: req.CPUs, MemoryMiB: req.MemoryMiB,
		DiskMiB: req.DiskMiB, Pids: req.Pids, PoolSize: pool,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo(info))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	infos := s.svc.Snapshots()
	out := make([]apitype.SnapshotInfo, len(infos))
	for i, info := range infos {
		out[i] = snapshotInfo(info)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.Snapshot(r.PathValue("tag"))
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
			Tag: req.Tag, N: req.N, TTL: ttl(req.TTLSecs),
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
			out.Children = append(out.Children, sandboxInfo(c))
		}
		writeJSON(w, http.StatusCreated, out)
	}
}
