package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestLabelFlags: create --label/--user send them, ls --label filters on
// the daemon and shows a LABELS column, info shows labels and the user.
func TestLabelFlags(t *testing.T) {
	var mu sync.Mutex
	var created apitype.CreateSandboxRequest
	var filters []string
	sb := apitype.SandboxInfo{ID: "sb1", Status: "running", Labels: map[string]string{"team": "a", "env": "dev"}, User: "user"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sandboxes":
			json.NewDecoder(r.Body).Decode(&created)
			w.WriteHeader(http.StatusCreated)
			out := sb
			out.Token = "tok"
			json.NewEncoder(w).Encode([]apitype.SandboxInfo{out})
		case r.URL.Path == "/v1/sandboxes":
			filters = r.URL.Query()["label"]
			json.NewEncoder(w).Encode([]apitype.SandboxInfo{sb})
		case r.URL.Path == "/v1/sandboxes/sb1":
			json.NewEncoder(w).Encode(sb)
		default:
			json.NewEncoder(w).Encode(apitype.Info{})
		}
	}))
	defer srv.Close()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_API_KEY", "key")
	t.Setenv("COVE_SANDBOX_TOKEN", "")

	if _, err := runCLI(t, "create", "--label", "team=a", "--label", "env=dev", "--user", "user", "-q"); err != nil {
		t.Fatal(err)
	}
	if created.Labels["team"] != "a" || created.Labels["env"] != "dev" || created.User != "user" {
		t.Errorf("create sent %+v", created)
	}
	out, err := runCLI(t, "ls", "--label", "team=a", "--label", "env=dev")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(filters, " ") != "env=dev team=a" || !strings.Contains(out, "LABELS") || !strings.Contains(out, "env=dev,team=a") {
		t.Errorf("ls sent %q and printed %q", filters, out)
	}
	if out, err := runCLI(t, "info", "sb1"); err != nil || !strings.Contains(out, "env=dev,team=a") || !strings.Contains(out, "user") {
		t.Errorf("info: %q, %v", out, err)
	}
	if _, err := runCLI(t, "create", "--label", "team"); err == nil || !strings.Contains(err.Error(), "K=V") {
		t.Errorf("create --label team: %v", err)
	}
}
