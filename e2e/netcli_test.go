package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// coveCLI runs the cove CLI against d with a token store of its own (in
// home) and returns its combined output.
func coveCLI(t *testing.T, d *daemon, home string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.bin, args...)
	cmd.Env = cliEnv(d, home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func cliEnv(d *daemon, home string) []string {
	return append(os.Environ(), "COVE_URL="+d.url, "COVE_API_KEY="+d.key, "HOME="+home, "XDG_CONFIG_HOME="+home)
}

// TestNetworkCLI: cove create takes a policy, cove net shows and sets it,
// cove expose prints a preview URL, and cove snapshot build with a policy
// streams its warm step's output, which downloads from an allowed server.
func TestNetworkCLI(t *testing.T) {
	d, tn := suite.shared, suite.net
	home := t.TempDir()
	id := strings.TrimSpace(coveCLI(t, d, home, "create", "-q", "--allow-cidr", cidr(tn.Allowed), "--allow-domain", testnet.AllowedName))
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), id) })
	want := apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Allowed)}, AllowDomains: []string{testnet.AllowedName}}
	if got := getNet(t, d, id).Network; !samePolicy(got, want) {
		t.Errorf("cove create --allow-cidr --allow-domain made %+v, want %+v", got, want)
	}
	if out := coveCLI(t, d, home, "net", id); !strings.Contains(out, cidr(tn.Allowed)) || !strings.Contains(out, testnet.AllowedName) {
		t.Errorf("cove net %s:\n%s\nwant the policy", id, out)
	}
	coveCLI(t, d, home, "net", id, "set", "--allow-cidr", cidr(tn.Other), "--deny-cidr", cidr(tn.Allowed))
	want = apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Other)}, DenyCIDRs: []string{cidr(tn.Allowed)}}
	if got := getNet(t, d, id).Network; !samePolicy(got, want) {
		t.Errorf("after cove net set: %+v, want %+v", got, want)
	}
	if out := coveCLI(t, d, home, "expose", id, "8000"); !strings.Contains(out, "http://8000-"+id+".localhost:") {
		t.Errorf("cove expose %s 8000:\n%s\nwant its preview URL", id, out)
	}

	// The warm step's output reaches the CLI as it runs.
	tag := "netcli-" + randomHex(4)
	t.Cleanup(func() { deleteSnapshotEventually(t, d, tag) })
	warm := "curl -fsS http://" + testnet.AllowedName + "/; sleep 2; echo warm-done"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.bin, "snapshot", "build", tag, "--pool-size", "0", "--allow-domain", testnet.AllowedName, "--warm", warm)
	cmd.Env = cliEnv(d, home)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var out strings.Builder
	seen := map[string]time.Duration{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			for _, s := range []string{testnet.Banner, "warm-done"} {
				if _, ok := seen[s]; !ok && strings.Contains(sc.Text(), s) {
					seen[s] = time.Since(t0)
				}
			}
		}
	}()
	err := cmd.Wait()
	pw.Close()
	wg.Wait()
	if err != nil {
		t.Fatalf("cove snapshot build: %v\n%s", err, out.String())
	}
	first, ok1 := seen[testnet.Banner]
	last, ok2 := seen["warm-done"]
	if !ok1 || !ok2 {
		t.Fatalf("cove snapshot build printed no download or no warm-done:\n%s", out.String())
	}
	if last-first < time.Second {
		t.Errorf("warm output did not stream to the CLI: the download at %v, warm-done at %v", first, last)
	}
	var snap apitype.SnapshotInfo
	d.call(t, http.MethodGet, "/v1/snapshots/"+tag, "", nil, http.StatusOK, &snap)
	if want := (apitype.NetworkPolicy{AllowDomains: []string{testnet.AllowedName}}); !samePolicy(snap.Network, want) {
		t.Errorf("the snapshot records %+v, want %+v", snap.Network, want)
	}
}
