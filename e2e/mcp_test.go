package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestMCPAgentFlow drives what an agent does, through the go-sdk client,
// over both transports: `cove mcp` on stdio and the daemon's /mcp.
func TestMCPAgentFlow(t *testing.T) {
	apiLayer(t)
	d := suite.shared
	tag := newSnapshot(t, d, 0)
	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command(suite.bin, "mcp")
		cmd.Env = append(os.Environ(), "COVE_URL="+d.url, "COVE_API_KEY="+d.key, "COVE_HTTP_TIMEOUT=120")
		cmd.Stderr = stderrLog(t)
		agentFlow(t, d, tag, connectMCP(t, &mcp.CommandTransport{Command: cmd}))
	})
	t.Run("http", func(t *testing.T) {
		agentFlow(t, d, tag, connectMCP(t, httpTransport(d.url, d.key)))
	})
}

// TestMCPAuth: /mcp takes the API key like the REST API, and refuses a
// client without it before any MCP is spoken.
func TestMCPAuth(t *testing.T) {
	d := suite.shared
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	for _, key := range []string{"", "wrong-" + randomHex(8)} {
		h := maps.Clone(hdr)
		if key != "" {
			h["Authorization"] = "Bearer " + key
		}
		if code, body := rawCall(t, http.MethodPost, d.url+"/mcp", h, initialize); code != http.StatusUnauthorized {
			t.Fatalf("POST /mcp with key %q: %d %s, want 401", key, code, body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := mcp.NewClient(&mcp.Implementation{Name: "e2e"}, nil).Connect(ctx, httpTransport(d.url, key), nil)
		cancel()
		if err == nil {
			t.Fatalf("go-sdk client connected to /mcp with key %q", key)
		}
	}
	h := maps.Clone(hdr)
	h["Authorization"] = "Bearer " + d.key
	if code, body := rawCall(t, http.MethodPost, d.url+"/mcp", h, initialize); code != http.StatusOK {
		t.Fatalf("POST /mcp with the key: %d %s", code, body)
	}
}

func agentFlow(t *testing.T, d *daemon, tag string, cs *mcp.ClientSession) {
	ctx := context.Background()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"spawn_sandboxes", "exec_command", "eval_code", "write_file", "read_file", "wait_for_text",
		"branch_sandbox", "kill_sandbox", "sandbox_run", "list_snapshots", "get_usage", "get_service_info"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools/list has no %s: %v", want, names)
		}
	}

	// Spawn two from the snapshot; the result carries their tokens.
	var spawned struct {
		Sandboxes []struct {
			ID, Token string
		}
	}
	callOK(t, cs, "spawn_sandboxes", map[string]any{"snapshot_tag": tag, "n": 2}, &spawned)
	if len(spawned.Sandboxes) != 2 || spawned.Sandboxes[0].Token == "" {
		t.Fatalf("spawn_sandboxes: %+v", spawned)
	}
	for _, sb := range spawned.Sandboxes {
		t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), sb.ID) })
	}
	a, b := spawned.Sandboxes[0].ID, spawned.Sandboxes[1].ID

	// Exec, without passing the token: the session has it.
	var ex struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
		PID      int    `json:"pid"`
	}
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": a, "command": "echo hello; uname -s; echo $FOO", "env": map[string]string{"FOO": "bar"}}, &ex)
	if ex.Stdout != "hello\nLinux\nbar\n" || ex.ExitCode != 0 {
		t.Fatalf("exec: %+v", ex)
	}

	// Eval keeps state between calls.
	var ev struct{ Result, Error string }
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": a, "code": "x = 40"}, &ev)
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": a, "code": "x + 2"}, &ev)
	if ev.Result != "42" {
		t.Fatalf("eval x + 2 = %+v", ev)
	}

	// Write a binary file, read it back in pages.
	blob := make([]byte, 150<<10)
	rand.Read(blob)
	callOK(t, cs, "write_file", map[string]any{"sandbox_id": a, "path": "/work/blob.bin", "content": base64.StdEncoding.EncodeToString(blob), "encoding": "base64"}, nil)
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": a, "command": "sha256sum /work/blob.bin | cut -d' ' -f1"}, &ex)
	if want := fmt.Sprintf("%x\n", sha256.Sum256(blob)); ex.Stdout != want {
		t.Fatalf("sha256 in the sandbox %q, want %q", ex.Stdout, want)
	}
	var got []byte
	for offset := int64(0); ; {
		var rd struct {
			Content    string `json:"content"`
			Encoding   string `json:"encoding"`
			EOF        bool   `json:"eof"`
			NextOffset int64  `json:"next_offset"`
		}
		callOK(t, cs, "read_file", map[string]any{"sandbox_id": a, "path": "/work/blob.bin", "offset": offset}, &rd)
		if rd.Encoding != "base64" {
			t.Fatalf("read_file of binary data: encoding %q", rd.Encoding)
		}
		part, err := base64.StdEncoding.DecodeString(rd.Content)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, part...)
		if rd.EOF {
			break
		}
		if len(got) > len(blob) || rd.NextOffset != int64(len(got)) {
			t.Fatalf("read_file paging: next_offset %d after %d bytes", rd.NextOffset, len(got))
		}
		offset = rd.NextOffset
	}
	if !bytes.Equal(got, blob) {
		t.Fatalf("read back %d bytes, not what was written", len(got))
	}
	// A procfs file, whose size reads as 0, reads with its content.
	var proc struct {
		Content string `json:"content"`
		EOF     bool   `json:"eof"`
	}
	callOK(t, cs, "read_file", map[string]any{"sandbox_id": a, "path": "/proc/self/status"}, &proc)
	if !strings.Contains(proc.Content, "Pid:") || !proc.EOF {
		t.Fatalf("read_file /proc/self/status: %+v", proc)
	}

	// A background process, and its output read until its last line.
	marker := "DONE-" + randomHex(4)
	start := time.Now()
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": a, "background": true,
		"command": "for i in 1 2 3; do echo tick $i; sleep 0.3; done; echo " + marker}, &ex)
	if ex.PID <= 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("background exec: %+v after %v", ex, time.Since(start))
	}
	if out := mcpAwaitOutput(t, cs, a, ex.PID, marker); !strings.HasPrefix(out, "tick 1\ntick 2\n") {
		t.Fatalf("read_process_output: %q", out)
	}

	// Branch a running sandbox, and watch the two diverge.
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": a, "command": "echo before > /work/f"}, nil)
	var br struct {
		Snapshot struct {
			Tag          string `json:"tag"`
			BranchedFrom string `json:"branched_from"`
		} `json:"snapshot"`
		PauseMs  float64                      `json:"pause_ms"`
		Children []struct{ ID, Token string } `json:"children"`
	}
	callOK(t, cs, "branch_sandbox", map[string]any{"sandbox_id": a}, &br)
	if len(br.Children) != 1 || br.Children[0].Token == "" || br.PauseMs <= 0 || br.Snapshot.BranchedFrom != a {
		t.Fatalf("branch_sandbox: %+v", br)
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, br.Snapshot.Tag) })
	child := br.Children[0].ID
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), child) })
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": a, "code": "x = 100"}, nil)
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": a, "command": "echo parent > /work/f"}, nil)
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": child, "code": "x"}, &ev)
	if ev.Result != "40" {
		t.Fatalf("child's x = %q, want the value at the branch, 40", ev.Result)
	}
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": child, "command": "cat /work/f"}, &ex)
	if ex.Stdout != "before\n" {
		t.Fatalf("child's /work/f = %q, want the content at the branch", ex.Stdout)
	}
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": a, "code": "x"}, &ev)
	if ev.Result != "100" {
		t.Fatalf("parent's x = %q after the branch", ev.Result)
	}

	// A sandbox this session did not make: its token is missing, and the
	// tool error says so.
	other := newSandbox(t)
	msg := callErr(t, cs, "exec_command", map[string]any{"sandbox_id": other.id, "command": "true"})
	if !strings.Contains(msg, "missing sandbox token for sandbox "+other.id) || !strings.Contains(msg, "sandbox_token") {
		t.Fatalf("missing token error: %s", msg)
	}
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": other.id, "sandbox_token": other.token, "command": "true"}, nil)
	// Nor can it copy that sandbox without its token.
	if msg := callErr(t, cs, "branch_sandbox", map[string]any{"sandbox_id": other.id}); !strings.Contains(msg, "sandbox_token") {
		t.Fatalf("branch_sandbox of another's sandbox: %s", msg)
	}

	// sandbox_run reuses one sandbox for the session.
	var run1, run2 struct {
		SandboxID string `json:"sandbox_id"`
		Stdout    string
	}
	callOK(t, cs, "sandbox_run", map[string]any{"command": "echo one > /work/run.txt; cat /work/run.txt"}, &run1)
	callOK(t, cs, "sandbox_run", map[string]any{"command": "cat /work/run.txt"}, &run2)
	if run1.Stdout != "one\n" || run2.Stdout != "one\n" || run1.SandboxID == "" || run1.SandboxID != run2.SandboxID {
		t.Fatalf("sandbox_run: %+v then %+v", run1, run2)
	}

	// Kill; the sandbox is then gone, and the error says what to do.
	callOK(t, cs, "kill_sandbox", map[string]any{"sandbox_id": b}, nil)
	if msg := callErr(t, cs, "get_sandbox", map[string]any{"sandbox_id": b}); !strings.Contains(msg, "list_sandboxes") {
		t.Fatalf("get_sandbox after kill: %s", msg)
	}
	var usage struct {
		SandboxesAlive int `json:"sandboxes_alive"`
		MaxSandboxes   int `json:"max_sandboxes"`
	}
	callOK(t, cs, "get_usage", nil, &usage)
	if usage.SandboxesAlive < 3 || usage.MaxSandboxes == 0 {
		t.Fatalf("get_usage: %+v", usage)
	}

	// The session's end kills sandbox_run's sandbox.
	cs.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := d.c.GetSandbox(ctx, run1.SandboxID); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox_run's sandbox %s outlived the MCP session", run1.SandboxID)
		}
	}
}

func connectMCP(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cove-e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// httpTransport reaches the daemon's /mcp with an API key.
func httpTransport(url, key string) *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{
		Endpoint:   url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key}},
		MaxRetries: -1,
	}
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// callOK calls a tool that must succeed and decodes its structured result
// into out, if not nil.
func callOK(t *testing.T, cs *mcp.ClientSession, name string, args any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", name, args, toolText(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured result %s: %v", name, b, err)
		}
	}
}

// callErr calls a tool that must fail with a tool error (not a protocol
// error) and returns its text.
func callErr(t *testing.T, cs *mcp.ClientSession, name string, args any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v, want a tool error", name, args, err)
	}
	if !res.IsError {
		t.Fatalf("%s %v: succeeded, want a tool error", name, args)
	}
	return toolText(res)
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// stderrLog is a file for a subprocess's stderr, shown if the test fails.
func stderrLog(t *testing.T) *os.File {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(f.Name())
			t.Logf("cove mcp stderr:\n%s", b)
		}
		f.Close()
	})
	return f
}

// TestMCPNetwork drives the network tools over the daemon's /mcp:
// create_sandbox takes a policy that get_sandbox shows; the sandbox reaches
// the allowed test server and no other until set_network denies everything;
// expose_port's URL and token serve a python3 http.server that
// exec_command started in the background.
func TestMCPNetwork(t *testing.T) {
	apiLayer(t)
	d, tn := suite.shared, suite.net
	cs := connectMCP(t, httpTransport(d.url, d.key))
	type sandboxOut struct {
		ID      string                `json:"id"`
		Token   string                `json:"token"`
		Network apitype.NetworkPolicy `json:"network"`
		Ports   []apitype.PortInfo    `json:"ports"`
	}
	allow := apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Allowed)}}
	var sb sandboxOut
	callOK(t, cs, "create_sandbox", map[string]any{"network": allow}, &sb)
	if sb.ID == "" || sb.Token == "" {
		t.Fatalf("create_sandbox: %+v", sb)
	}
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), sb.ID) })
	var got sandboxOut
	callOK(t, cs, "get_sandbox", map[string]any{"sandbox_id": sb.ID}, &got)
	if !samePolicy(got.Network, allow) || got.Token != "" {
		t.Fatalf("get_sandbox shows network %+v (token %q), want %+v and no token", got.Network, got.Token, allow)
	}

	// curl from inside, through exec_command: exit 0 and the banner, or a
	// prompt failure (refused, not timed out: curl's 28).
	fetch := func(want bool, a netip.Addr, why string) {
		t.Helper()
		var ex struct {
			Stdout   string `json:"stdout"`
			Stderr   string `json:"stderr"`
			ExitCode int    `json:"exit_code"`
		}
		callOK(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID,
			"args": []string{"curl", "-sS", "--connect-timeout", "3", "-m", "5", webURL("http", a)}}, &ex)
		switch {
		case want && (ex.ExitCode != 0 || !strings.Contains(ex.Stdout, banner(a))):
			t.Errorf("%s: curl %s: exit %d %q %q, want the test server's answer", why, a, ex.ExitCode, ex.Stdout, ex.Stderr)
		case !want && (ex.ExitCode == 0 || ex.ExitCode == 28):
			t.Errorf("%s: curl %s: exit %d %q %q, want it refused at once", why, a, ex.ExitCode, ex.Stdout, ex.Stderr)
		}
	}
	fetch(true, tn.Allowed, "allowed by create_sandbox")
	fetch(false, tn.Other, "not allowed by create_sandbox")
	var set sandboxOut
	callOK(t, cs, "set_network", map[string]any{"sandbox_id": sb.ID}, &set)
	if !samePolicy(set.Network, apitype.NetworkPolicy{}) {
		t.Errorf("set_network to deny answered network %+v", set.Network)
	}
	fetch(false, tn.Allowed, "after set_network denied everything")

	// A dev server, as an agent starts one, and its preview URL.
	marker := "mcp-" + randomHex(6)
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "command": "mkdir -p /tmp/www && echo " + marker + " > /tmp/www/index.html"}, nil)
	var bg struct {
		PID int `json:"pid"`
	}
	callOK(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "background": true, "cwd": "/tmp/www",
		"command": "python3 -u -m http.server 8000 --bind 0.0.0.0"}, &bg)
	mcpAwaitOutput(t, cs, sb.ID, bg.PID, "Serving HTTP")
	var ep struct {
		URL        string `json:"url"`
		HTTPSURL   string `json:"https_url"`
		Token      string `json:"token"`
		BrowserURL string `json:"browser_url"`
	}
	callOK(t, cs, "expose_port", map[string]any{"sandbox_id": sb.ID, "port": 8000}, &ep)
	if want := fmt.Sprintf("http://8000-%s.localhost:%d", sb.ID, d.port()); strings.TrimSuffix(ep.URL, "/") != want || ep.Token == "" || ep.HTTPSURL == "" {
		t.Fatalf("expose_port: %+v, want url %s, an https_url and a token", ep, want)
	}
	c := previewClient(d, nil)
	if resp, body := previewGet(t, c, ep.URL, map[string]string{previewHeader: ep.Token}); resp.StatusCode != http.StatusOK || !strings.Contains(body, marker) {
		t.Errorf("expose_port's url with its token: %d %q", resp.StatusCode, body)
	}
	if resp, body := previewGet(t, c, ep.URL, nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, marker) {
		t.Errorf("expose_port's url without the token: %d %q, want 401", resp.StatusCode, body)
	}
	jar, _ := cookiejar.New(nil)
	if resp, body := previewGet(t, previewClient(d, jar), ep.BrowserURL, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, marker) {
		t.Errorf("expose_port's browser_url: %d %q", resp.StatusCode, body)
	}
	callOK(t, cs, "get_sandbox", map[string]any{"sandbox_id": sb.ID}, &got)
	if len(got.Ports) != 1 || got.Ports[0].Port != 8000 || got.Ports[0].URL != ep.URL || got.Ports[0].Token != "" {
		t.Errorf("get_sandbox shows ports %+v, want 8000 at %s without its token", got.Ports, ep.URL)
	}
}
