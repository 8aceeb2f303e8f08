package api

import (
	"errors"
	"net/http"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func (s *Server) sandboxMetricsRoutes(m *http.ServeMux) {
	// The API key only, like GET /v1/sandboxes/{id}: figures, no data.
	m.HandleFunc("GET /v1/sandboxes/{id}/metrics", s.auth(s.sandboxMetrics))
}

func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apitype.SandboxMetrics{
		ID: info.ID, Status: info.Status, Backend: info.Backend,
		MemoryLimitBytes: int64(info.MemoryMiB) << 20, DiskBytes: info.PausedBytes + info.CheckpointBytes,
	}
	read := s.cfg.ReadUsage
	if read == nil {
		read = cgroup.ReadUsage
	}
	u, err := read(info.ID)
	switch {
	case errors.Is(err, cgroup.ErrNoCgroup):
	case err != nil:
		s.fail(w, r, err)
		return
	default:
		out.Cgroup = true
		out.CPUSeconds, out.MemoryBytes, out.MemoryPeakBytes = u.CPUSeconds, u.MemoryBytes, u.MemoryPeakBytes
		out.DiskWrittenBytes, out.Pids = u.DiskWriteBytes, u.Pids
	}
	writeJSON(w, http.StatusOK, out)
}
