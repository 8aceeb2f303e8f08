package envd_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/e2b/envd"
)

// sdkDir is the npm e2b package of a version `make test` installs, under
// COVE_E2B_SDK_DIR if set (as the e2e suite reads it).
func sdkDir(t *testing.T, version string) string {
	cache := os.Getenv("COVE_E2B_SDK_DIR")
	if cache == "" {
		cache = "/var/cache/cove/e2b-sdk"
	}
	dir := filepath.Join(cache, version, "node_modules", "e2b")
	_, err := os.Stat(filepath.Join(dir, "package.json"))
	_, nerr := exec.LookPath("node")
	if err != nil || nerr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the e2b SDK (%s: %v) or node (%v) is missing", dir, err, nerr)
		}
		t.Skipf("no e2b SDK at %s or no node: make test installs it", dir)
	}
	return dir
}

// TestSDK runs the published SDK's process, PTY and file calls against the
// facade, with a stub control plane that hands out the one sandbox.
func TestSDK(t *testing.T) {
	// 2.51 is the current SDK; 2.45 the last of the v1 control-plane paths.
	for _, v := range []string{"2.51.0", "2.45.0"} {
		t.Run(v, func(t *testing.T) { testSDK(t, v) })
	}
}

func testSDK(t *testing.T, version string) {
	sdk := sdkDir(t, version)
	e := newEnv(t)
	cp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && (r.URL.Path == "/v2/sandboxes" || r.URL.Path == "/sandboxes"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(map[string]any{"sandboxID": e.sb.ID, "templateID": "base", "clientID": "cove",
				"envdVersion": envd.EnvdVersion, "envdAccessToken": e.sb.Token, "domain": "localhost"})
		case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/sandboxes/"):
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, `{"code":404,"message":"not in the stub"}`, http.StatusNotFound)
		}
	}))
	defer cp.Close()
	cmd := exec.CommandContext(ctxT(t), "node", "testdata/sdk.js")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "TEST_DIR="+e.dir, "E2B_API_URL="+cp.URL, "E2B_SANDBOX_URL="+e.url,
		"E2B_API_KEY=e2b_0123456789abcdef", "E2B_DOMAIN=localhost")
	if version >= "2.51" {
		cmd.Env = append(cmd.Env, "E2B_SDK_NEW=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
		t.Fatalf("sdk.js: %v\n%s", err, out)
	}
}
