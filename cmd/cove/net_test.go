package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/fakedaemon"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// startNetFake starts a fakedaemon with network presets and points cove
// at it, with an empty sandbox token store.
func startNetFake(t *testing.T) (*fakedaemon.Daemon, *client.Client) {
	t.Helper()
	fake := fakedaemon.New()
	fake.Info.Network = apitype.NetworkInfo{Enabled: true, Presets: []string{"debian", "pypi"}, PreviewDomain: "localhost"}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_TOKEN", "")
	t.Setenv("COVE_API_KEY", "key")
	t.Setenv("COVE_SANDBOX_TOKEN", "")
	return fake, client.New(srv.URL, "key")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCLIContext runs cove with args until ctx ends, writing its stdout and
// stderr to the writers given.
func runCLIContext(ctx context.Context, stdout, stderr io.Writer, args ...string) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(strings.NewReader(""))
	_, err := root.ExecuteContextC(ctx)
	return err
}

// policyOf is sandbox id's policy, as the daemon has it.
func policyOf(t *testing.T, cl *client.Client, id string) apitype.NetworkPolicy {
	t.Helper()
	sb, err := cl.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.Network
}

func TestNetCLI(t *testing.T) {
	_, cl := startNetFake(t)
	run := func(args ...string) (string, error) { return runCLI(t, args...) }

	out, err := run("create", "-q", "--allow-domain", "pypi.org", "--allow-domain", "*.pythonhosted.org,example.org", "--preset", "debian")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := strings.TrimSpace(out)
	want := apitype.NetworkPolicy{AllowDomains: []string{"pypi.org", "*.pythonhosted.org", "example.org"}, Presets: []string{"debian"}}
	if got := policyOf(t, cl, id); !slices.Equal(got.AllowDomains, want.AllowDomains) || !slices.Equal(got.Presets, want.Presets) {
		t.Errorf("created with %+v, want %+v", got, want)
	}
	if out, err := run("net", id); err != nil || !strings.Contains(out, "allow domains:  pypi.org, *.pythonhosted.org, example.org") ||
		!strings.Contains(out, "presets:        debian") {
		t.Errorf("net: %q, %v", out, err)
	}
	var p apitype.NetworkPolicy
	if out, err := run("net", id, "--json"); err != nil || json.Unmarshal([]byte(out), &p) != nil || len(p.AllowDomains) != 3 {
		t.Errorf("net --json: %q, %v", out, err)
	}

	if out, err := run("net", id, "set", "--allow-cidr", "192.0.2.0/24", "--deny-cidr", "192.0.2.9"); err != nil ||
		!strings.Contains(out, "allow cidrs:    192.0.2.0/24") {
		t.Errorf("net set: %q, %v", out, err)
	}
	if got := policyOf(t, cl, id); len(got.AllowDomains) != 0 || !slices.Equal(got.DenyCIDRs, []string{"192.0.2.9"}) {
		t.Errorf("set replaced the policy with %+v", got)
	}
	if _, err := run("net", id, "set", "--allow-cidr", "bad"); !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "hint") {
		t.Errorf("net set with a bad CIDR: %v", err)
	}
	if got := policyOf(t, cl, id); !slices.Equal(got.AllowCIDRs, []string{"192.0.2.0/24"}) {
		t.Errorf("a refused set changed the policy to %+v", got)
	}
	if out, err := run("net", id, "set", "--deny-all"); err != nil || !strings.Contains(out, "denied") {
		t.Errorf("net set --deny-all: %q, %v", out, err)
	}
	if got := policyOf(t, cl, id); !got.IsZero() {
		t.Errorf("--deny-all left %+v", got)
	}
	if _, err := run("net", "sb-nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("net of an unknown sandbox: %v", err)
	}

	for _, args := range [][]string{
		{"net"},
		{"net", id, "frob"},
		{"net", id, "set"},
		{"net", id, "set", "--deny-all", "--preset", "pypi"},
		{"net", id, "--allow-domain", "x.org"},
		{"net", id, "set", "extra", "--deny-all"},
	} {
		if _, err := run(args...); exitCode(err) != 2 {
			t.Errorf("cove %s: %v; want a usage error", strings.Join(args, " "), err)
		}
	}
}

func TestExposeCLI(t *testing.T) {
	startNetFake(t)
	run := func(args ...string) (string, error) { return runCLI(t, args...) }
	out, err := run("create", "-q")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)

	out, err = run("expose", id, "8000")
	wantURL := fmt.Sprintf("http://8000-%s.localhost:8080/?token=pt-%s-8000", id, id)
	if err != nil || !strings.Contains(out, wantURL) || !strings.Contains(out, "token required") || !strings.Contains(out, "X-Cove-Preview-Token") {
		t.Errorf("expose: %q, %v; want %s", out, err, wantURL)
	}
	var p apitype.PortInfo
	if out, err := run("expose", id, "3000", "--public", "--json"); err != nil || json.Unmarshal([]byte(out), &p) != nil || !p.Public || p.Port != 3000 {
		t.Errorf("expose --public --json: %q, %v", out, err)
	}
	out, err = run("ports", id)
	if err != nil || !strings.Contains(out, "PORT") || !strings.Contains(out, "3000  public") || !strings.Contains(out, "pt-"+id+"-8000") {
		t.Errorf("ports: %q, %v", out, err)
	}
	var ps []apitype.PortInfo
	if out, err := run("ports", id, "--json"); err != nil || json.Unmarshal([]byte(out), &ps) != nil || len(ps) != 2 {
		t.Errorf("ports --json: %q, %v", out, err)
	}
	// info shows the policy and the ports, not their tokens.
	out, err = run("info", id)
	if err != nil || !strings.Contains(out, "egress:") || !strings.Contains(out, "denied") ||
		!strings.Contains(out, fmt.Sprintf("http://8000-%s.localhost:8080", id)) || strings.Contains(out, "pt-") {
		t.Errorf("info ID: %q, %v", out, err)
	}

	if out, err := run("unexpose", id, "8000"); err != nil || out != "unexposed 8000\n" {
		t.Errorf("unexpose: %q, %v", out, err)
	}
	if _, err := run("unexpose", id, "8000"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unexpose again: %v", err)
	}
	if out, err := run("ports", id, "--json"); err != nil || strings.Contains(out, "8000") {
		t.Errorf("ports after unexpose: %q, %v", out, err)
	}
	if _, err := run("expose", "sb-nope", "8000", "--sandbox-token", "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("expose in an unknown sandbox: %v", err)
	}

	for _, args := range [][]string{
		{"expose", id}, {"expose", id, "0"}, {"expose", id, "-1"}, {"expose", id, "70000"}, {"expose", id, "abc"},
		{"unexpose", id, "abc"}, {"unexpose", id}, {"ports"},
		{"port-forward", id}, {"port-forward", id, "abc"}, {"port-forward", id, "8000:0"}, {"port-forward", id, "70000:80"},
		{"info", id, "extra"},
	} {
		if _, err := run(args...); exitCode(err) != 2 {
			t.Errorf("cove %s: %v; want a usage error", strings.Join(args, " "), err)
		}
	}
}

func TestInfoNetwork(t *testing.T) {
	fake, _ := startNetFake(t)
	fake.Info.Network.PreviewHTTPSPort = 8443
	out, err := runCLI(t, "info")
	if err != nil || !strings.Contains(out, "presets:") || !strings.Contains(out, "debian, pypi") ||
		!strings.Contains(out, "http://PORT-ID.localhost:") || !strings.Contains(out, "https://PORT-ID.localhost:8443") {
		t.Errorf("info: %q, %v", out, err)
	}
	fake.Info.Network = apitype.NetworkInfo{}
	if out, err := runCLI(t, "info"); err != nil || !strings.Contains(out, "none") {
		t.Errorf("info without a network: %q, %v", out, err)
	}
}

// TestSnapshotPolicyCLI: a build's policy and warm output, and the
// children that take it or another.
func TestSnapshotPolicyCLI(t *testing.T) {
	_, cl := startNetFake(t)
	var stdout, stderr bytes.Buffer
	err := runCLIContext(context.Background(), &stdout, &stderr,
		"snapshot", "build", "py", "--allow-domain", "pypi.org", "--warm", "pip install numpy", "--pool-size", "0")
	if err != nil || !strings.Contains(stderr.String(), "warming: pip install numpy\n") || !strings.Contains(stdout.String(), "py") {
		t.Fatalf("snapshot build: %q, %q, %v", stdout.String(), stderr.String(), err)
	}
	si, err := cl.GetSnapshot(context.Background(), "py")
	if err != nil || !slices.Equal(si.Network.AllowDomains, []string{"pypi.org"}) {
		t.Errorf("the snapshot's policy: %+v, %v", si.Network, err)
	}

	out, err := runCLI(t, "spawn", "py", "-q")
	if err != nil {
		t.Fatal(err)
	}
	kid := strings.TrimSpace(out)
	if got := policyOf(t, cl, kid); !slices.Equal(got.AllowDomains, []string{"pypi.org"}) {
		t.Errorf("a spawned child has %+v, want the snapshot's", got)
	}
	out, err = runCLI(t, "spawn", "py", "-q", "--deny-domain", "pypi.org")
	if err != nil {
		t.Fatal(err)
	}
	if got := policyOf(t, cl, strings.TrimSpace(out)); len(got.AllowDomains) != 0 || !slices.Equal(got.DenyDomains, []string{"pypi.org"}) {
		t.Errorf("a child spawned with a policy has %+v", got)
	}
	out, err = runCLI(t, "branch", kid, "-n", "1", "-q", "--tag", "b", "--allow-cidr", "192.0.2.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if got := policyOf(t, cl, strings.TrimSpace(out)); !slices.Equal(got.AllowCIDRs, []string{"192.0.2.0/24"}) {
		t.Errorf("a branched child has %+v", got)
	}
}

func TestParseForward(t *testing.T) {
	for _, tt := range []struct {
		in            string
		local, remote int
		ok            bool
	}{
		{"8000", 8000, 8000, true},
		{"9000:8000", 9000, 8000, true},
		{"0:8000", 0, 8000, true},
		{"0", 0, 0, false},
		{"8000:", 0, 0, false},
		{":8000", 0, 0, false},
		{"a:b", 0, 0, false},
		{"1:2:3", 0, 0, false},
		{"65536:80", 0, 0, false},
	} {
		l, r, err := parseForward(tt.in)
		if (err == nil) != tt.ok || tt.ok && (l != tt.local || r != tt.remote) {
			t.Errorf("parseForward(%q) = %d, %d, %v", tt.in, l, r, err)
		}
	}
}

func TestPortForwardCLI(t *testing.T) {
	startNetFake(t)
	out, err := runCLI(t, "create", "-q")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	if err := runCLIContext(context.Background(), io.Discard, io.Discard, "port-forward", "sb-nope", "8000", "--sandbox-token", "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("port-forward to an unknown sandbox: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- runCLIContext(ctx, &stdout, &stderr, "port-forward", id, "0:8000") }()
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("port-forward printed %q, %q", stdout.String(), stderr.String())
		}
		line, _ := bufio.NewReader(strings.NewReader(stdout.String())).ReadString('\n')
		if rest, ok := strings.CutPrefix(line, "forwarding "); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "hello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Errorf("through port-forward: %q, %v", buf, err)
	}
	conn.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("port-forward ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("port-forward did not end with its context")
	}
}

func TestCompleteNetwork(t *testing.T) {
	_, cl := startNetFake(t)
	out, err := runCLI(t, "create", "-q")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	sb, _ := cl.CreateSandboxes(context.Background(), apitype.CreateSandboxRequest{})
	if _, err := cl.ExposePort(context.Background(), id, "tok-"+id, 8000, false); err != nil {
		t.Fatal(err)
	}
	ids := []string{id, sb[0].ID}
	slices.Sort(ids)
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"net", ""}, ids},
		{[]string{"net", id, ""}, []string{"set"}},
		{[]string{"net", id, "set", "--preset", ""}, []string{"debian", "pypi"}},
		{[]string{"create", "--preset", "p"}, []string{"pypi"}},
		{[]string{"expose", ""}, ids},
		{[]string{"expose", id, ""}, nil},
		{[]string{"unexpose", id, ""}, []string{"8000"}},
		{[]string{"ports", ""}, ids},
		{[]string{"port-forward", ""}, ids},
		{[]string{"info", ""}, ids},
	} {
		got := complete(t, tt.args...)
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("complete %q = %q, want %q", tt.args, got, tt.want)
		}
	}
}
