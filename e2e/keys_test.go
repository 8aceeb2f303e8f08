package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestKeys drives API keys on a daemon of its own: the daemon's key makes
// keys (`cove keys create`), a new key works and is no admin, `cove keys
// ls` never shows a secret, bad requests make nothing, and a revocation
// stops the key at once, ends its exec stream and its MCP session, and
// outlives a restart.
func TestKeys(t *testing.T) {
	apiLayer(t)
	d, err := startDaemon(filepath.Join(suite.tmp, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var doomed, other apitype.CreateKeyResponse
	if err := json.Unmarshal([]byte(coveCLI(t, d, home, "keys", "create", "--name", "doomed", "--tenant", "acme",
		"--max-sandboxes", "4", "--max-memory-mib", "4096", "--json")), &doomed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doomed.ID, "key-") || len(doomed.Key) != 64 || doomed.Tenant != "acme" || doomed.Admin ||
		doomed.MaxSandboxes != 4 || doomed.MaxMemoryMiB != 4096 {
		t.Fatalf("cove keys create --json: %+v", doomed)
	}
	// The table shows the key once, and the line E2B's SDKs read.
	table := coveCLI(t, d, home, "keys", "create", "--name", "other", "--tenant", "acme")
	for _, l := range strings.Split(table, "\n") {
		if k, ok := strings.CutPrefix(l, "E2B_API_KEY=e2b_"); ok {
			other.Key = k
		}
		if id, ok := strings.CutPrefix(l, "ID"); ok {
			other.ID = strings.TrimSpace(id)
		}
	}
	if len(other.Key) != 64 || !strings.Contains(table, "KEY") || !strings.Contains(table, other.Key) || !strings.HasPrefix(other.ID, "key-") {
		t.Fatalf("cove keys create printed:\n%s", table)
	}
	dc := client.New(d.url, doomed.Key)
	oc := client.New(d.url, "e2b_"+other.Key) // the E2B form is the same key

	// The new keys work, and are no admins.
	if _, err := dc.Info(ctx); err != nil {
		t.Fatalf("the new key: %v", err)
	}
	if _, err := oc.Info(ctx); err != nil {
		t.Fatalf("the new key with e2b_: %v", err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/keys", ""}, {"POST", "/v1/keys", `{"name":"x","tenant":"acme","admin":true}`}, {"DELETE", "/v1/keys/" + other.ID, ""},
	} {
		code, body := rawCall(t, c.method, d.url+c.path, map[string]string{"Authorization": "Bearer " + doomed.Key}, c.body)
		var e apitype.ErrorBody
		if code != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Code != apitype.CodeForbidden {
			t.Fatalf("%s %s by a non-admin key: %d %s, want 403 forbidden", c.method, c.path, code, body)
		}
	}

	// ls shows them, without secret or hash.
	lsOut := coveCLI(t, d, home, "keys", "ls", "--json")
	var list []apitype.KeyInfo
	if err := json.Unmarshal([]byte(lsOut), &list); err != nil {
		t.Fatalf("cove keys ls --json: %v\n%s", err, lsOut)
	}
	if len(list) != 2 || list[0].ID != doomed.ID || list[0].Name != "doomed" || list[0].MaxSandboxes != 4 || list[1].ID != other.ID || list[0].Revoked {
		t.Fatalf("cove keys ls --json: %+v", list)
	}
	if strings.Contains(lsOut, doomed.Key) || strings.Contains(lsOut, other.Key) || strings.Contains(lsOut, `"key"`) {
		t.Fatalf("cove keys ls --json shows a secret:\n%s", lsOut)
	}

	// Bad input: a clear 4xx, and nothing made.
	admin := map[string]string{"Authorization": "Bearer " + d.key, "Content-Type": "application/json"}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"malformed JSON", "POST", "/v1/keys", `{"name":"x","tenant":`, 400, ""},
		{"unknown field", "POST", "/v1/keys", `{"name":"x","tenant":"acme","max_sandboxs":1}`, 400, "max_sandboxs"},
		{"negative quota", "POST", "/v1/keys", `{"name":"x","tenant":"acme","max_sandboxes":-1}`, 400, "max_sandboxes=-1"},
		{"bad tenant", "POST", "/v1/keys", `{"name":"x","tenant":"../Acme"}`, 400, `tenant "../Acme"`},
		{"no name", "POST", "/v1/keys", `{"tenant":"acme"}`, 400, "name is required"},
		{"unknown id", "DELETE", "/v1/keys/key-000000000000", "", 404, "key-000000000000"},
	} {
		code, body := rawCall(t, c.method, d.url+c.path, admin, c.body)
		var e apitype.ErrorBody
		if code != c.status || json.Unmarshal(body, &e) != nil || e.Error == "" || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %s, want %d naming %q", c.name, code, body, c.status, c.want)
		}
	}
	if got, err := d.c.ListKeys(ctx); err != nil || len(got) != 2 {
		t.Fatalf("after bad requests: %d keys (%v), want 2", len(got), err)
	}

	// Under the doomed key: a sandbox, an exec stream in it, an MCP session.
	infos, err := dc.CreateSandboxes(ctx, apitype.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create with the new key: %v\n%s", err, d.logTail())
	}
	sb := infos[0]
	// Killed at the end with the tenant's other key: the doomed one will not work.
	t.Cleanup(func() { oc.DeleteSandbox(context.Background(), sb.ID) })
	streamCtx, streamCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer streamCancel()
	req, _ := http.NewRequestWithContext(streamCtx, "POST", d.url+"/v1/sandboxes/"+sb.ID+"/exec",
		strings.NewReader(`{"shell":"setsid python3 -m http.server 8000 </dev/null >/dev/null 2>&1 & echo started; sleep 600"}`))
	req.Header.Set("Authorization", "Bearer "+doomed.Key)
	req.Header.Set(apitype.SandboxTokenHeader, sb.Token)
	req.Header.Set("Accept", apitype.ContentTypeNDJSON)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("exec stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "started") {
		t.Fatalf("exec stream's first record %q: %v", sc.Text(), sc.Err())
	}
	tunnel := tunnelWithKey(t, d, doomed.Key, sb, 8000)
	defer tunnel.Close()
	cs := connectMCP(t, httpTransport(d.url, doomed.Key))
	sessionDone := make(chan error, 1)
	go func() { sessionDone <- cs.Wait() }()
	var seen struct {
		Sandboxes []struct {
			ID string `json:"id"`
		} `json:"sandboxes"`
	}
	callOK(t, cs, "list_sandboxes", map[string]any{}, &seen)
	if len(seen.Sandboxes) != 1 || seen.Sandboxes[0].ID != sb.ID {
		t.Fatalf("the key's MCP session lists %+v, want its one sandbox %s", seen.Sandboxes, sb.ID)
	}
	// The other key's session lives on.
	ocs := connectMCP(t, httpTransport(d.url, other.Key))

	// Revoke.
	t0 := time.Now()
	var revoked []struct {
		ID      string `json:"id"`
		Revoked bool   `json:"revoked"`
	}
	if err := json.Unmarshal([]byte(coveCLI(t, d, home, "keys", "revoke", doomed.ID, "--json")), &revoked); err != nil ||
		len(revoked) != 1 || !revoked[0].Revoked || revoked[0].ID != doomed.ID {
		t.Fatalf("cove keys revoke --json: %+v %v", revoked, err)
	}
	ended := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(ended)
	}()
	select {
	case <-ended:
		t.Logf("exec stream ended %s after the revocation", time.Since(t0))
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked key's exec stream still open 15 s after the revocation")
	}
	if _, err := dc.Info(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("the revoked key's next call: %v, want 401", err)
	}
	code, body := rawCall(t, "GET", d.url+"/v1/info", map[string]string{"Authorization": "Bearer " + doomed.Key}, "")
	wcode, wbody := rawCall(t, "GET", d.url+"/v1/info", map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 64)}, "")
	var re, we apitype.ErrorBody
	json.Unmarshal(body, &re)
	json.Unmarshal(wbody, &we)
	if code != 401 || wcode != 401 || re.Error != we.Error || re.Code != apitype.CodeUnauthorized {
		t.Fatalf("revoked: %d %s; wrong: %d %s: want the same 401", code, body, wcode, wbody)
	}
	// So does its port tunnel, to a server that outlives the stream (its
	// own session, which killing the stream's processes leaves alone).
	tunnel.SetReadDeadline(time.Now().Add(15 * time.Second))
	if n, err := tunnel.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the revoked key's port tunnel: read %d, %v; want EOF", n, err)
	}
	// The session ends: the daemon closes it, and its SSE stream with it.
	select {
	case err := <-sessionDone:
		t.Logf("the revoked key's MCP session ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked key's MCP session still open 15 s after the revocation")
	}
	mctx, mcancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := cs.CallTool(mctx, &mcp.CallToolParams{Name: "list_sandboxes", Arguments: map[string]any{}})
	mcancel()
	if err == nil && !res.IsError {
		t.Fatalf("the revoked key's MCP session still answers: %+v", res)
	}
	callOK(t, ocs, "list_sandboxes", map[string]any{}, nil)
	// Its sandbox lives on, for the tenant's other keys.
	if _, err := oc.GetSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("the revoked key's sandbox, by the tenant's other key: %v", err)
	}

	// A restart keeps the keys; the revoked one stays revoked.
	if err := oc.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Info(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("the revoked key after a restart: %v, want 401", err)
	}
	if _, err := oc.Info(ctx); err != nil {
		t.Fatalf("a live key after a restart: %v", err)
	}
	list, err = d.c.ListKeys(ctx)
	if err != nil || len(list) != 2 || !list[0].Revoked || list[0].RevokedAt == nil || list[1].Revoked {
		t.Fatalf("keys after a restart: %+v, %v", list, err)
	}
}

// tunnelWithKey opens the connect tunnel to port on sb with key, once
// something listens there.
func tunnelWithKey(t *testing.T, d *daemon, key string, sb apitype.SandboxInfo, port int) net.Conn {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", d.addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /v1/sandboxes/%s/ports/%d/connect HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s: %s\r\nConnection: Upgrade\r\nUpgrade: cove-tcp\r\n\r\n",
			sb.ID, port, d.addr, key, apitype.SandboxTokenHeader, sb.Token)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return &bufferedConn{conn, br}
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		// Nothing listens yet: 502, or 503 for a refused dial.
		if resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("connect: %d %s", resp.StatusCode, b)
		}
	}
}
