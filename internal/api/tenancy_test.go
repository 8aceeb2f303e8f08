package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestTenantNotFound: through the API, every call about another tenant's
// sandbox or snapshot answers 404 not_found, as for an id that names
// nothing, and a tenant lists only its own.
func TestTenantNotFound(t *testing.T) {
	s := newServer(t)
	acme := bearerOf(s.createKey(t, `{"name":"a","tenant":"acme"}`).Key)
	beta := bearerOf(s.createKey(t, `{"name":"b","tenant":"beta"}`).Key)
	var made []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{}`, acme, http.StatusCreated, &made)
	sb := made[0]
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/branch", `{"tag":"acme-snap"}`, hdr{"Authorization": acme["Authorization"], apitype.SandboxTokenHeader: sb.Token}, http.StatusCreated, nil)

	with := func(h hdr) hdr {
		out := hdr{"Authorization": beta["Authorization"], apitype.SandboxTokenHeader: sb.Token}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	id := sb.ID
	tests := []struct {
		name, method, path, body string
	}{
		{"get", "GET", "/v1/sandboxes/" + id, ""},
		{"exec", "POST", "/v1/sandboxes/" + id + "/exec", `{"cmd":["true"]}`},
		{"read file", "GET", "/v1/sandboxes/" + id + "/files?path=/etc/hostname", ""},
		{"list files", "GET", "/v1/sandboxes/" + id + "/list?path=/", ""},
		{"branch", "POST", "/v1/sandboxes/" + id + "/branch", `{}`},
		{"snapshot", "POST", "/v1/sandboxes/" + id + "/snapshot", `{"tag":"stolen"}`},
		{"expose", "POST", "/v1/sandboxes/" + id + "/ports", `{"port":8080}`},
		{"extend", "POST", "/v1/sandboxes/" + id + "/extend", `{"ttl_secs":60}`},
		{"pause", "POST", "/v1/sandboxes/" + id + "/pause", ""},
		{"metrics", "GET", "/v1/sandboxes/" + id + "/metrics", ""},
		{"kill", "DELETE", "/v1/sandboxes/" + id, ""},
		{"get snapshot", "GET", "/v1/snapshots/acme-snap", ""},
		{"spawn from snapshot", "POST", "/v1/sandboxes", `{"snapshot_tag":"acme-snap"}`},
		{"delete snapshot", "DELETE", "/v1/snapshots/acme-snap", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := s.doString(t, tt.method, tt.path, tt.body, with(nil))
			var e apitype.ErrorBody
			json.Unmarshal(body, &e)
			if resp.StatusCode != http.StatusNotFound || e.Code != apitype.CodeNotFound {
				t.Fatalf("beta %s %s: %d %s, want 404 not_found", tt.method, tt.path, resp.StatusCode, body)
			}
			if strings.Contains(string(body), "acme") && !strings.Contains(string(body), "acme-snap") {
				t.Errorf("the answer names the owner: %s", body)
			}
		})
	}
	var list []apitype.SandboxInfo
	s.call(t, "GET", "/v1/sandboxes", "", beta, http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("beta lists %d sandboxes", len(list))
	}
	var snaps []apitype.SnapshotInfo
	s.call(t, "GET", "/v1/snapshots", "", beta, http.StatusOK, &snaps)
	if len(snaps) != 0 {
		t.Errorf("beta lists %d snapshots", len(snaps))
	}
	// acme's are all still there.
	s.call(t, "GET", "/v1/sandboxes/"+id, "", acme, http.StatusOK, nil)
	s.call(t, "GET", "/v1/snapshots/acme-snap", "", acme, http.StatusOK, nil)
}

// TestQuotaExceeded: a quota's refusal is a 429 quota_exceeded whose
// message names the quota and its value; nothing was made.
func TestQuotaExceeded(t *testing.T) {
	s := newServer(t)
	h := bearerOf(s.createKey(t, `{"name":"a","tenant":"acme","max_sandboxes":1,"max_spawn_n":5}`).Key)
	s.call(t, "POST", "/v1/sandboxes", `{}`, h, http.StatusCreated, nil)
	for _, tt := range []struct{ body, want string }{
		{`{}`, "quota max_sandboxes=1 of tenant acme: it holds 1, this asks for 1"},
		{`{"n":50}`, "quota max_spawn_n=5 of tenant acme: this asks for 50"},
	} {
		resp, body := s.doString(t, "POST", "/v1/sandboxes", tt.body, h)
		var e apitype.ErrorBody
		json.Unmarshal(body, &e)
		if resp.StatusCode != http.StatusTooManyRequests || e.Code != apitype.CodeQuota || !strings.HasPrefix(e.Error, tt.want) {
			t.Errorf("create %s: %d %s, want 429 %s %q", tt.body, resp.StatusCode, body, apitype.CodeQuota, tt.want)
		}
	}
	var list []apitype.SandboxInfo
	s.call(t, "GET", "/v1/sandboxes", "", h, http.StatusOK, &list)
	if len(list) != 1 {
		t.Errorf("after the refusals acme has %d sandboxes, want 1", len(list))
	}
}

// TestSandboxTokenRoute: GET /v1/sandboxes/{id}/token refuses a key with
// reveal_tokens off (403) and another tenant's (404), and, on a daemon that
// seals no tokens, its own (409).
func TestSandboxTokenRoute(t *testing.T) {
	s := newServer(t)
	acme := bearerOf(s.createKey(t, `{"name":"a","tenant":"acme"}`).Key)
	hidden := bearerOf(s.createKey(t, `{"name":"h","tenant":"acme","reveal_tokens":false}`).Key)
	beta := bearerOf(s.createKey(t, `{"name":"b","tenant":"beta"}`).Key)
	var made []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{}`, acme, http.StatusCreated, &made)
	path := "/v1/sandboxes/" + made[0].ID + "/token"
	for _, tt := range []struct {
		name string
		h    hdr
		want int
	}{
		{"reveal_tokens off", hidden, http.StatusForbidden},
		{"another tenant", beta, http.StatusNotFound},
		{"own key, nothing sealed", acme, http.StatusConflict},
		{"no key", hdr{"Authorization": ""}, http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := s.doString(t, "GET", path, "", tt.h)
			if resp.StatusCode != tt.want || strings.Contains(string(body), made[0].Token) {
				t.Fatalf("%d %s, want %d and no token", resp.StatusCode, body, tt.want)
			}
		})
	}
	var keys []apitype.KeyInfo
	s.call(t, "GET", "/v1/keys", "", nil, http.StatusOK, &keys)
	for _, k := range keys {
		if want := k.Name != "h"; k.RevealTokens != want {
			t.Errorf("key %s: reveal_tokens %v, want %v", k.Name, k.RevealTokens, want)
		}
	}
}
