package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// auth requires an API key: the daemon's own (the token file's) or one
// made with POST /v1/keys. The handler runs with the key's principal in
// its context, under a context that revoking the key cancels, so a
// stream the key opened ends with it.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, apitype.CodeUnauthorized,
				"missing API key: send 'Authorization: Bearer <key>' (the daemon writes its key to its token file, /etc/cove/token by default)")
			return
		}
		ctx, p, release, err := s.keys.Authenticate(r.Context(), key)
		if err != nil {
			// One answer for a key never made and one revoked: which
			// keys exist is not for an unauthenticated caller to learn.
			writeError(w, http.StatusUnauthorized, apitype.CodeUnauthorized, "wrong or revoked API key")
			return
		}
		defer release()
		notePrincipal(w, p)
		h(w, r.WithContext(ctx))
	}
}

// admin is auth for an admin key: any other gets 403.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return s.auth(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := tenant.FromContext(r.Context()); !ok || !p.Admin {
			writeError(w, http.StatusForbidden, apitype.CodeForbidden,
				"this API key is not an admin key: "+r.Method+" "+r.URL.Path+" takes one (the daemon's own, or one made with admin: true)")
			return
		}
		h(w, r)
	})
}

// bearer is the API key r carries.
func bearer(r *http.Request) (string, bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	key = strings.TrimSpace(key)
	return key, ok && key != ""
}

// notePrincipal records who a request authenticated as on w's request,
// for its audit line.
func notePrincipal(w http.ResponseWriter, p tenant.Principal) {
	for {
		switch x := w.(type) {
		case *obsWriter:
			x.who = &p
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// newKeys is the key manager of an API configured with only the daemon's
// key: that key alone, no keys to make.
func newKeys(apiKey string) *keys.Manager {
	// A MemStore's Keys never fails, so neither does New.
	m, _ := keys.New(context.Background(), keys.Config{Store: &keys.MemStore{}, Bootstrap: apiKey})
	return m
}
