package api

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/internal/obs"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// newTestKeys is a key manager in memory whose bootstrap key is boot.
func newTestKeys(t *testing.T, boot string) *keys.Manager {
	t.Helper()
	m, err := keys.New(context.Background(), keys.Config{Store: &keys.MemStore{}, Bootstrap: boot})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustKey makes a key and returns its secret.
func mustKey(t *testing.T, m *keys.Manager, o keys.CreateOptions) string {
	t.Helper()
	_, secret, err := m.Create(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

func bearerOf(key string) hdr { return hdr{"Authorization": "Bearer " + key} }

// createKey makes a key through the API with the daemon's key.
func (s *testServer) createKey(t *testing.T, body string) apitype.CreateKeyResponse {
	t.Helper()
	var out apitype.CreateKeyResponse
	s.call(t, "POST", "/v1/keys", body, nil, http.StatusCreated, &out)
	return out
}

func TestKeysAPI(t *testing.T) {
	s := newServer(t)
	k := s.createKey(t, `{"name":"ci","tenant":"acme","max_sandboxes":3,"max_vcpus":4,"max_memory_mib":2048,"max_ttl_secs":600,"max_spawn_n":2,"max_disk_mib":100}`)
	if !strings.HasPrefix(k.ID, "key-") || len(k.Key) != 64 || k.Name != "ci" || k.Tenant != "acme" || k.Admin ||
		k.MaxSandboxes != 3 || k.MaxVCPUs != 4 || k.MaxMemoryMiB != 2048 || k.MaxTTLSecs != 600 || k.MaxSpawnN != 2 ||
		k.MaxDiskMiB != 100 || k.CreatedAt.IsZero() || k.Revoked {
		t.Fatalf("created %+v", k)
	}
	adm := s.createKey(t, `{"name":"ops","tenant":"ops","admin":true}`)

	// The new key works, also with the E2B prefix.
	s.call(t, "GET", "/v1/info", "", bearerOf(k.Key), http.StatusOK, nil)
	s.call(t, "GET", "/v1/info", "", bearerOf("e2b_"+k.Key), http.StatusOK, nil)
	// A non-admin key may not manage keys; an admin key may.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/keys", `{"name":"x","tenant":"acme"}`},
		{"GET", "/v1/keys", ""},
		{"DELETE", "/v1/keys/" + adm.ID, ""},
	} {
		var e apitype.ErrorBody
		s.call(t, c.method, c.path, c.body, bearerOf(k.Key), http.StatusForbidden, &e)
		if e.Code != apitype.CodeForbidden {
			t.Errorf("%s %s by a non-admin: %+v", c.method, c.path, e)
		}
	}
	s.call(t, "POST", "/v1/keys", `{"name":"y","tenant":"globex"}`, bearerOf(adm.Key), http.StatusCreated, nil)

	// The list shows every key, never a secret or a hash.
	var list []apitype.KeyInfo
	raw := s.call(t, "GET", "/v1/keys", "", nil, http.StatusOK, &list)
	if len(list) != 3 || list[0].ID != k.ID || list[0].MaxSandboxes != 3 || list[1].ID != adm.ID || !list[1].Admin {
		t.Fatalf("list = %+v", list)
	}
	if strings.Contains(string(raw), k.Key) || strings.Contains(string(raw), keys.Hash(k.Key)) || strings.Contains(string(raw), `"key"`) {
		t.Fatalf("list shows a secret or hash: %s", raw)
	}

	// Revoked: 401 at once, with the answer a wrong key gets.
	s.call(t, "DELETE", "/v1/keys/"+k.ID, "", nil, http.StatusNoContent, nil)
	var revoked, wrong apitype.ErrorBody
	s.call(t, "GET", "/v1/info", "", bearerOf(k.Key), http.StatusUnauthorized, &revoked)
	s.call(t, "GET", "/v1/info", "", bearerOf(strings.Repeat("f", 64)), http.StatusUnauthorized, &wrong)
	if revoked.Code != apitype.CodeUnauthorized || revoked.Error != wrong.Error || strings.Contains(revoked.Error, k.ID) {
		t.Fatalf("revoked: %+v; wrong: %+v", revoked, wrong)
	}
	s.call(t, "GET", "/v1/keys", "", nil, http.StatusOK, &list)
	if !list[0].Revoked || list[0].RevokedAt == nil || list[1].Revoked {
		t.Fatalf("after revoke: %+v", list)
	}
	// Again is fine; unknown is 404; the bootstrap key is not revocable here.
	s.call(t, "DELETE", "/v1/keys/"+k.ID, "", nil, http.StatusNoContent, nil)
	var e apitype.ErrorBody
	s.call(t, "DELETE", "/v1/keys/key-000000000000", "", nil, http.StatusNotFound, &e)
	if e.Code != apitype.CodeNotFound || !strings.Contains(e.Error, "key-000000000000") {
		t.Fatalf("unknown id: %+v", e)
	}
	s.call(t, "DELETE", "/v1/keys/bootstrap", "", nil, http.StatusBadRequest, nil)
	s.call(t, "GET", "/v1/info", "", nil, http.StatusOK, nil)
}

func TestKeysAPIBadInput(t *testing.T) {
	s := newServer(t)
	tests := []struct {
		name, body, want string
	}{
		{"malformed", `{"name":"a","tenant":`, ""},
		{"unknown field", `{"name":"a","tenant":"acme","max_sandbox":3}`, "max_sandbox"},
		{"trailing data", `{"name":"a","tenant":"acme"} {}`, ""},
		{"empty body", ``, ""},
		{"no name", `{"tenant":"acme"}`, "name is required"},
		{"no tenant", `{"name":"a"}`, "tenant is required"},
		{"bad tenant", `{"name":"a","tenant":"Acme Corp"}`, `tenant "Acme Corp"`},
		{"negative quota", `{"name":"a","tenant":"acme","max_vcpus":-1}`, "max_vcpus=-1"},
		{"oversized quota", `{"name":"a","tenant":"acme","max_memory_mib":99999999999}`, "max_memory_mib=99999999999"},
		{"beyond int64", `{"name":"a","tenant":"acme","max_memory_mib":1e30}`, ""},
		{"wrong type", `{"name":"a","tenant":"acme","admin":"yes"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e apitype.ErrorBody
			s.call(t, "POST", "/v1/keys", tt.body, hdr{"Content-Type": "application/json"}, http.StatusBadRequest, &e)
			if e.Code != apitype.CodeBadRequest || !strings.Contains(e.Error, tt.want) {
				t.Fatalf("error %+v, want one naming %q", e, tt.want)
			}
		})
	}
	var list []apitype.KeyInfo
	s.call(t, "GET", "/v1/keys", "", nil, http.StatusOK, &list)
	if len(list) != 0 {
		t.Fatalf("bad requests made keys: %+v", list)
	}
	// No key, or not a bearer one.
	for _, h := range []hdr{{"Authorization": ""}, {"Authorization": "Basic eDp5"}, {"Authorization": "Bearer "}} {
		var e apitype.ErrorBody
		s.call(t, "GET", "/v1/keys", "", h, http.StatusUnauthorized, &e)
		if e.Code != apitype.CodeUnauthorized {
			t.Fatalf("%v: %+v", h, e)
		}
	}
}

// TestRevokeEndsStreams checks that revoking a key ends a stream it opened
// (a streamed exec of a long command), and leaves another key's running.
func TestRevokeEndsStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := obs.OpenAudit(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	s := newServer(t, func(c *Config) { c.Audit = a })
	doomed := s.createKey(t, `{"name":"doomed","tenant":"acme"}`)
	other := s.createKey(t, `{"name":"other","tenant":"acme"}`)

	open := func(key string) (*http.Response, context.CancelFunc) {
		t.Helper()
		var sbs []apitype.SandboxInfo
		s.call(t, "POST", "/v1/sandboxes", `{}`, bearerOf(key), http.StatusCreated, &sbs)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/v1/sandboxes/"+sbs[0].ID+"/exec",
			strings.NewReader(`{"shell":"echo started; sleep 60"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set(apitype.SandboxTokenHeader, sbs[0].Token)
		req.Header.Set("Accept", apitype.ContentTypeNDJSON)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("exec stream: %v %v", resp, err)
		}
		return resp, cancel
	}
	resp, cancel := open(doomed.Key)
	defer cancel()
	defer resp.Body.Close()
	otherResp, otherCancel := open(other.Key)
	defer otherCancel()
	defer otherResp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "started") {
		t.Fatalf("first record %q: %v", sc.Text(), sc.Err())
	}

	start := time.Now()
	s.call(t, "DELETE", "/v1/keys/"+doomed.ID, "", nil, http.StatusNoContent, nil)
	ended := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked key's exec stream still open 10 s after the revocation")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the stream took %s to end", d)
	}
	// The other key's stream is still open: its first record arrives.
	osc := bufio.NewScanner(otherResp.Body)
	if !osc.Scan() || !strings.Contains(osc.Text(), "started") {
		t.Fatalf("other stream: %q %v", osc.Text(), osc.Err())
	}

	// The audit log names the key and its tenant.
	var saw bool
	for _, l := range readAudit(t, path) {
		if l.Route == "POST /v1/sandboxes" && l.Who == doomed.ID+"@acme" {
			saw = true
		}
	}
	if !saw {
		t.Errorf("no audit line names %s@acme: %+v", doomed.ID, readAudit(t, path))
	}

}
