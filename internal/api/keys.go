package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func (s *Server) keyRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /v1/keys", s.admin(s.createKey))
	m.HandleFunc("GET /v1/keys", s.admin(s.listKeys))
	m.HandleFunc("DELETE /v1/keys/{id}", s.admin(s.revokeKey))
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	var req apitype.CreateKeyRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	k, secret, err := s.keys.Create(r.Context(), keys.CreateOptions{Name: req.Name, Tenant: req.Tenant, Admin: req.Admin, Limits: req.UsageQuota,
		HideTokens: req.RevealTokens != nil && !*req.RevealTokens})
	if err != nil {
		s.failKey(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, apitype.CreateKeyResponse{Key: secret, KeyInfo: keyInfo(k)})
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	all, err := s.keys.List(r.Context())
	if err != nil {
		s.failKey(w, r, err)
		return
	}
	out := make([]apitype.KeyInfo, len(all))
	for i, k := range all {
		out[i] = keyInfo(k)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	if err := s.keys.Revoke(r.Context(), r.PathValue("id")); err != nil {
		s.failKey(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failKey maps the key manager's errors.
func (s *Server) failKey(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, keys.ErrInvalid):
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
	case errors.Is(err, keys.ErrNotFound):
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, fmt.Sprintf("no API key %s (list them with GET /v1/keys)", r.PathValue("id")))
	default:
		s.fail(w, r, err)
	}
}

func keyInfo(k keys.Key) apitype.KeyInfo {
	out := apitype.KeyInfo{ID: k.ID, Name: k.Name, Tenant: k.Tenant, Admin: k.Admin, RevealTokens: k.RevealTokens, UsageQuota: k.Limits,
		CreatedAt: k.CreatedAt.UTC(), Revoked: !k.RevokedAt.IsZero()}
	if out.Revoked {
		t := k.RevokedAt.UTC()
		out.RevokedAt = &t
	}
	return out
}
