package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// e2bSDKDir is where `make e2b-sdk` installs the published SDKs, one
// directory per version.
func e2bSDKDir() string {
	if d := os.Getenv("COVE_E2B_SDK_DIR"); d != "" {
		return d
	}
	return "/var/cache/cove/e2b-sdk"
}

// e2bModule is the entry point of the installed SDK of version v; its
// absence fails the test (make e2e installs it).
func e2bModule(t *testing.T, v string) string {
	t.Helper()
	m := filepath.Join(e2bSDKDir(), v, "node_modules", "e2b", "dist", "index.mjs")
	if _, err := os.Stat(m); err != nil {
		t.Fatalf("E2B SDK %s not installed (%v): run `make e2b-sdk`", v, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not installed (make deps-e2e): %v", err)
	}
	return m
}

// TestE2BSDK runs the published E2B SDK, unmodified, against a daemon of
// its own serving the E2B facade (--e2b-api, --e2b-envd): the SDK is
// configured only by E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and
// E2B_DOMAIN, and trusts cove's CA through NODE_EXTRA_CA_CERTS. 2.51
// drives everything the facade serves (v2 routes), 2.45 the create, run
// and files part (v1 routes); a wrong key, an unknown sandbox and another
// tenant's sandbox fail as the SDK's own errors.
func TestE2BSDK(t *testing.T) {
	apiLayer(t)
	cur, old := e2bModule(t, "2.51.0"), e2bModule(t, "2.45.0")
	apiAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	envdAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(filepath.Join(suite.tmp, "e2b"), "--e2b-api", apiAddr, "--e2b-envd", envdAddr,
		"--preview-https-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	info, err := d.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Network.PreviewCA == "" || info.Network.PreviewHTTPSPort == 0 {
		t.Fatalf("no HTTPS preview: %+v", info.Network)
	}
	acme, err := d.c.CreateKey(ctx, apitype.CreateKeyRequest{Name: "sdk", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	beta, err := d.c.CreateKey(ctx, apitype.CreateKeyRequest{Name: "sdk", Tenant: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	domain := fmt.Sprintf("localhost:%d", info.Network.PreviewHTTPSPort)
	node := func(t *testing.T, module, key, mode string, extra ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "node", filepath.Join("e2b", "sdk.mjs"), mode)
		// Nothing of the caller's environment: the SDK sees only what a
		// user would set to point it at cove.
		cmd.Env = append([]string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
			"E2B_API_URL=http://" + apiAddr, "E2B_SANDBOX_URL=http://" + envdAddr,
			"E2B_API_KEY=e2b_" + key, "E2B_DOMAIN=" + domain,
			"NODE_EXTRA_CA_CERTS=" + info.Network.PreviewCA,
			"COVE_E2B_MODULE=" + module, "COVE_E2B_RUN=" + randomHex(6),
		}, extra...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("node sdk.mjs %s (%s):\n%s", mode, module, out.String())
		if err != nil || !strings.Contains(out.String(), "done "+mode) {
			t.Fatalf("sdk.mjs %s: %v\ndaemon log:\n%s", mode, err, d.logTail())
		}
		return out.String()
	}

	t.Run("2.51 full", func(t *testing.T) { node(t, cur, acme.Key, "full") })
	t.Run("2.51 template build", func(t *testing.T) { node(t, cur, acme.Key, "template") })
	t.Run("2.45 v1 routes", func(t *testing.T) { node(t, old, acme.Key, "v1") })
	t.Run("errors", func(t *testing.T) {
		node(t, cur, acme.Key, "auth")
		node(t, old, acme.Key, "auth")
	})
	t.Run("tenancy", func(t *testing.T) {
		made, err := client.New(d.url, acme.Key).CreateSandboxes(ctx, apitype.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		node(t, cur, beta.Key, "other", "COVE_E2B_FOREIGN="+made[0].ID)
		// And acme's sandbox is still there.
		if _, err := d.c.GetSandbox(ctx, made[0].ID); err != nil {
			t.Fatal(err)
		}
	})
}
