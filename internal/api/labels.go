package api

import (
	"net/http"

	"github.com/cove-sandbox/cove/internal/sandbox"
)

// listLabeled is the sandboxes GET /v1/sandboxes lists: those that have
// every label its repeated ?label=key=value filters name.
func (s *Server) listLabeled(r *http.Request) ([]sandbox.Info, error) {
	filter, err := sandbox.ParseLabelFilter(r.URL.Query()["label"])
	if err != nil {
		return nil, err
	}
	infos := s.svc.List(r.Context())
	if len(filter) == 0 {
		return infos, nil
	}
	out := infos[:0]
	for _, i := range infos {
		if sandbox.MatchLabels(i.Labels, filter) {
			out = append(out, i)
		}
	}
	return out, nil
}
