package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/api"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestKeysCLI runs cove keys create, ls and revoke against the real API
// handlers (keys in memory).
func TestKeysCLI(t *testing.T) {
	srv := httptest.NewServer(api.New(api.Config{APIKey: "admin-key"}))
	t.Cleanup(srv.Close)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_API_KEY", "admin-key")
	t.Setenv("COVE_SANDBOX_TOKEN", "")

	out, err := runCLI(t, "keys", "create", "--name", "ci", "--tenant", "acme", "--max-sandboxes", "3", "--max-memory-mib", "2048")
	if err != nil {
		t.Fatal(err)
	}
	var secret, id string
	for _, l := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(l, "E2B_API_KEY=e2b_"); ok {
			secret = k
		}
		if f := strings.Fields(l); len(f) == 2 && f[0] == "ID" {
			id = f[1]
		}
	}
	for _, want := range []string{"TENANT  acme", "QUOTA   sandboxes=3 memory_mib=2048", "KEY     " + secret, "shown only now"} {
		if len(secret) != 64 || !strings.Contains(out, want) {
			t.Fatalf("keys create printed (want %q):\n%s", want, out)
		}
	}

	out, err = runCLI(t, "keys", "create", "--name", "ops", "--tenant", "ops", "--admin", "--json")
	var made apitype.CreateKeyResponse
	if err != nil || json.Unmarshal([]byte(out), &made) != nil || !made.Admin || len(made.Key) != 64 {
		t.Fatalf("keys create --json: %q, %v", out, err)
	}

	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no tenant", []string{"keys", "create", "--name", "x"}, `"tenant" not set`},
		{"bad tenant", []string{"keys", "create", "--name", "x", "--tenant", "A B"}, `tenant "A B"`},
		{"negative quota", []string{"keys", "create", "--name", "x", "--tenant", "a", "--max-vcpus", "-1"}, "max_vcpus=-1"},
		{"unknown id", []string{"keys", "revoke", "key-000000000000"}, "key-000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := runCLI(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("cove %s: %v, want an error naming %q", strings.Join(tt.args, " "), err, tt.wantErr)
			}
		})
	}

	out, err = runCLI(t, "keys", "ls")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "live") || strings.Contains(out, secret) {
		t.Fatalf("keys ls: %q, %v", out, err)
	}
	if out, err := runCLI(t, "keys", "revoke", id); err != nil || out != id+"\n" {
		t.Fatalf("keys revoke: %q, %v", out, err)
	}
	out, err = runCLI(t, "keys", "ls", "--json")
	var list []apitype.KeyInfo
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 || !list[0].Revoked || list[1].Revoked {
		t.Fatalf("keys ls --json: %q, %v", out, err)
	}
	if out, err := runCLI(t, "keys", "ls", "-q"); err != nil || out != id+"\n"+made.ID+"\n" {
		t.Fatalf("keys ls -q: %q, %v", out, err)
	}
	// The revoked key opens nothing; the admin key made with --admin does.
	t.Setenv("COVE_API_KEY", secret)
	if _, err := runCLI(t, "keys", "ls"); err == nil || !strings.Contains(err.Error(), "wrong or revoked") {
		t.Fatalf("keys ls with the revoked key: %v", err)
	}
	t.Setenv("COVE_API_KEY", made.Key)
	if out, err := runCLI(t, "keys", "revoke", "--json", made.ID); err != nil || !strings.Contains(out, `"revoked": true`) {
		t.Fatalf("keys revoke --json of itself: %q, %v", out, err)
	}
}
