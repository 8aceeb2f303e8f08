package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// connect serves a Server over an in-memory transport and returns a
// connected client session.
func connect(t *testing.T, api API) (*Server, *sdk.ClientSession) {
	t.Helper()
	s := New(Config{API: api, Version: "test"})
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := s.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return s, cs
}

// call calls a tool, failing the test on a protocol error (never right
// for a tool call) and, if wantErr differs, on the tool's error status.
func call(t *testing.T, cs *sdk.ClientSession, name string, args any, wantErr bool) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError != wantErr {
		t.Fatalf("%s: isError=%v, want %v: %s", name, res.IsError, wantErr, text(res))
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func decode[T any](t *testing.T, res *sdk.CallToolResult) T {
	t.Helper()
	var v T
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return v
}

func TestToolsList(t *testing.T) {
	_, cs := connect(t, newFake())
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"branch_sandbox", "checkpoint_sandbox", "create_sandbox", "eval_code", "exec_command", "expose_port", "extend_sandbox",
		"get_sandbox", "get_sandbox_metrics", "get_service_info", "get_usage", "kill_sandbox", "list_files", "list_processes", "list_sandboxes", "list_snapshots",
		"list_templates", "make_dir", "move_file", "pause_sandbox", "ping_sandbox", "read_file", "read_process_output", "remove_file", "resume_sandbox",
		"rollback_sandbox", "sandbox_run", "set_network",
		"signal_process", "snapshot_sandbox", "spawn_sandboxes", "stat_file", "wait_for_text", "write_file", "write_process_stdin"}
	wantRO := []string{"get_sandbox", "get_sandbox_metrics", "get_service_info", "get_usage", "list_files", "list_processes", "list_sandboxes", "list_snapshots",
		"list_templates",
		"ping_sandbox", "read_file", "read_process_output", "stat_file", "wait_for_text"}
	var got, gotRO []string
	for _, tl := range res.Tools {
		got = append(got, tl.Name)
		a := tl.Annotations
		if a == nil || tl.OutputSchema == nil || tl.InputSchema == nil || len(tl.Description) < 40 {
			t.Errorf("%s: want annotations, input and output schemas and a description", tl.Name)
			continue
		}
		if a.ReadOnlyHint {
			gotRO = append(gotRO, tl.Name)
		}
		if a.OpenWorldHint == nil || *a.OpenWorldHint || a.DestructiveHint == nil {
			t.Errorf("%s: want openWorldHint=false and an explicit destructiveHint", tl.Name)
		}
		if destructive := *a.DestructiveHint; destructive != slices.Contains([]string{"exec_command", "eval_code", "sandbox_run", "write_file", "kill_sandbox", "move_file", "remove_file", "signal_process", "rollback_sandbox"}, tl.Name) {
			t.Errorf("%s: destructiveHint=%v", tl.Name, destructive)
		}
		for _, schema := range []any{tl.InputSchema, tl.OutputSchema} {
			if b, _ := json.Marshal(schema); bytes.Contains(b, []byte(`"type":[`)) {
				t.Errorf("%s: a multi-type schema, which single-type clients reject: %s", tl.Name, b)
			}
		}
		props, _ := tl.InputSchema.(map[string]any)["properties"].(map[string]any)
		if _, ok := props["sandbox_id"]; ok && slices.Contains([]string{"exec_command", "read_file", "write_file", "ping_sandbox"}, tl.Name) {
			if _, ok := props["sandbox_token"]; !ok {
				t.Errorf("%s: data-plane tool without sandbox_token", tl.Name)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(gotRO)
	if !slices.Equal(got, want) {
		t.Errorf("tools %v\nwant %v", got, want)
	}
	if !slices.Equal(gotRO, wantRO) {
		t.Errorf("read-only tools %v\nwant %v (docs/MCP.md's autoApprove list must match)", gotRO, wantRO)
	}
}

func TestTokens(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)

	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{}, false))
	if sb.Token == "" || !sb.SessionHasToken {
		t.Fatalf("create result %+v: want the token, once", sb)
	}
	// The session remembers the token.
	out := decode[ExecOut](t, call(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "command": "echo hi"}, false))
	if out.Stdout != "echo hi" || out.SandboxID != sb.ID {
		t.Fatalf("exec: %+v", out)
	}
	// GET and LIST never show tokens.
	if got := decode[Sandbox](t, call(t, cs, "get_sandbox", map[string]any{"sandbox_id": sb.ID}, false)); got.Token != "" || !got.SessionHasToken {
		t.Fatalf("get_sandbox: %+v", got)
	}
	res := call(t, cs, "list_sandboxes", nil, false)
	if strings.Contains(text(res), sb.Token) {
		t.Fatalf("list_sandboxes shows a token: %s", text(res))
	}

	// A sandbox made elsewhere: the token is missing, and the error says so.
	f.mu.Lock()
	other := f.add("")
	f.mu.Unlock()
	res = call(t, cs, "exec_command", map[string]any{"sandbox_id": other.ID, "command": "true"}, true)
	if msg := text(res); !strings.Contains(msg, "missing sandbox token for sandbox "+other.ID) || !strings.Contains(msg, "sandbox_token") {
		t.Fatalf("missing token error: %s", msg)
	}
	// A wrong one is refused with a hint; the right one works.
	res = call(t, cs, "ping_sandbox", map[string]any{"sandbox_id": other.ID, "sandbox_token": "nope"}, true)
	if !strings.Contains(text(res), "refused the sandbox token") {
		t.Fatalf("wrong token error: %s", text(res))
	}
	call(t, cs, "ping_sandbox", map[string]any{"sandbox_id": other.ID, "sandbox_token": other.Token}, false)

	// A gone sandbox is reported as such.
	call(t, cs, "kill_sandbox", map[string]any{"sandbox_id": sb.ID}, false)
	res = call(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "command": "true", "sandbox_token": sb.Token}, true)
	if !strings.Contains(text(res), "does not exist") || !strings.Contains(text(res), "list_sandboxes") {
		t.Fatalf("gone sandbox error: %s", text(res))
	}
}

func TestUserMistakesAreToolErrors(t *testing.T) {
	_, cs := connect(t, newFake())
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"exec_command", map[string]any{"sandbox_id": "x", "command": "ls", "bogus": 1}, "bogus"},
		{"exec_command", map[string]any{"command": "ls"}, "sandbox_id"},
		{"spawn_sandboxes", map[string]any{"snapshot_tag": "nope"}, "snapshot nope not found"},
		{"expose_port", map[string]any{"sandbox_id": "x", "port": 8000}, "missing sandbox token"},
		{"expose_port", map[string]any{"sandbox_id": "x", "port": 0}, "1-65535"},
		{"expose_port", map[string]any{"sandbox_id": "x", "port": 70000}, "1-65535"},
		{"expose_port", map[string]any{"sandbox_id": "x", "port": "abc"}, "port"},
		{"set_network", map[string]any{"sandbox_id": "x"}, "does not exist"},
		{"set_network", map[string]any{"sandbox_id": "x", "allow_domains": "pypi.org"}, "allow_domains"},
		{"create_sandbox", map[string]any{"network": map[string]any{"allow": []string{"x"}}}, "allow"},
		{"extend_sandbox", map[string]any{"sandbox_id": "x", "ttl_secs": -1}, "positive"},
	} {
		res := call(t, cs, c.tool, c.args, true)
		if !strings.Contains(text(res), c.want) {
			t.Errorf("%s %v: error %q, want it to mention %q", c.tool, c.args, text(res), c.want)
		}
	}
}

func TestSpawnBranch(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	spawned := decode[sandboxesOut](t, call(t, cs, "spawn_sandboxes", map[string]any{"snapshot_tag": "base", "n": 2}, false))
	if len(spawned.Sandboxes) != 2 || spawned.Sandboxes[0].Token == "" {
		t.Fatalf("spawn: %+v", spawned)
	}
	br := decode[branchOut](t, call(t, cs, "branch_sandbox", map[string]any{"sandbox_id": spawned.Sandboxes[0].ID, "tag": "b1"}, false))
	if len(br.Children) != 1 || br.Snapshot.BranchedFrom != spawned.Sandboxes[0].ID || br.PauseMs == 0 {
		t.Fatalf("branch: %+v", br)
	}
	// Children are usable without a token.
	call(t, cs, "eval_code", map[string]any{"sandbox_id": br.Children[0].ID, "code": "1+1"}, false)
	usage := decode[usageOut](t, call(t, cs, "get_usage", nil, false))
	if usage.SandboxesAlive != 3 || usage.RemainingSandboxes != 7 || len(usage.SessionSandboxes) != 3 {
		t.Fatalf("usage: %+v", usage)
	}
	// The session spawns from the snapshots it saved with their source's
	// token; another session needs it passed.
	call(t, cs, "snapshot_sandbox", map[string]any{"sandbox_id": br.Children[0].ID, "tag": "s1"}, false)
	for _, tool := range []string{"spawn_sandboxes", "create_sandbox"} {
		for _, tag := range []string{"b1", "s1"} {
			call(t, cs, tool, map[string]any{"snapshot_tag": tag}, false)
		}
	}
	_, other := connect(t, f)
	if got := text(call(t, other, "spawn_sandboxes", map[string]any{"snapshot_tag": "b1"}, true)); !strings.Contains(got, "sandbox_token") {
		t.Errorf("spawn from another session's branch: %q, want it to mention sandbox_token", got)
	}
	call(t, other, "spawn_sandboxes", map[string]any{"snapshot_tag": "b1", "sandbox_token": spawned.Sandboxes[0].Token}, false)
}

// TestBranchNeedsToken: branch_sandbox and snapshot_sandbox present the
// token the session holds, and say what to do when it holds none.
func TestBranchNeedsToken(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	theirs := f.add("") // made by another client
	for _, tool := range []string{"branch_sandbox", "snapshot_sandbox"} {
		if got := text(call(t, cs, tool, map[string]any{"sandbox_id": theirs.ID}, true)); !strings.Contains(got, "sandbox_token") {
			t.Errorf("%s without a token: %q, want it to mention sandbox_token", tool, got)
		}
		if got := text(call(t, cs, tool, map[string]any{"sandbox_id": theirs.ID, "sandbox_token": "nope"}, true)); !strings.Contains(got, "refused") {
			t.Errorf("%s with a wrong token: %q", tool, got)
		}
		call(t, cs, tool, map[string]any{"sandbox_id": theirs.ID, "sandbox_token": theirs.Token, "tag": tool}, false)
	}
}

func TestExecOutput(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", nil, false))

	big := strings.Repeat("é", 100<<10) // 200 KiB, two bytes a rune
	f.exec = func(apitype.ExecRequest) apitype.ExecResponse {
		return apitype.ExecResponse{Stdout: "start" + big + "end", ExitCode: 3}
	}
	res := call(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "args": []string{"cat", "big"}}, false)
	out := decode[ExecOut](t, res)
	if !out.Truncated || len(out.Stdout) > maxStream+100 || !strings.HasPrefix(out.Stdout, "start") || !strings.HasSuffix(out.Stdout, "end") {
		t.Fatalf("truncated output: truncated=%v len=%d", out.Truncated, len(out.Stdout))
	}
	if !strings.Contains(out.Note, "read_file") || !strings.Contains(text(res), "exit_code 3") {
		t.Fatalf("note %q, text %.200q", out.Note, text(res))
	}
	if got := f.lastExec(); !slices.Equal(got.Args, []string{"cat", "big"}) || got.TimeoutSecs != defaultExecTimeout {
		t.Fatalf("exec request %+v", got)
	}
}

func TestReadFile(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", nil, false))

	// Text, in pages that never split a rune.
	content := strings.Repeat("ab€", 30000) // 150000 bytes
	call(t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/t.txt", "content": content}, false)
	var got strings.Builder
	var offset int64
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("too many pages")
		}
		r := decode[readOut](t, call(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/t.txt", "offset": offset}, false))
		if r.Encoding != "text" || r.Length > maxRead || r.Size != int64(len(content)) {
			t.Fatalf("page at %d: %+v", offset, r)
		}
		got.WriteString(r.Content)
		if r.EOF {
			break
		}
		if r.NextOffset != offset+int64(r.Length) || !strings.Contains(r.Note, "offset=") {
			t.Fatalf("page at %d: next %d, note %q", offset, r.NextOffset, r.Note)
		}
		offset = r.NextOffset
	}
	if got.String() != content {
		t.Fatal("pages do not add up to the file")
	}

	// Binary comes back as base64 with a mime type.
	bin := []byte{0, 1, 2, 0xff, 0xfe, 'P', 'K'}
	call(t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/b.bin",
		"content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64", "mode": "0600"}, false)
	r := decode[readOut](t, call(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/b.bin"}, false))
	dec, _ := base64.StdEncoding.DecodeString(r.Content)
	if r.Encoding != "base64" || !bytes.Equal(dec, bin) || r.MimeType == "" || !r.EOF {
		t.Fatalf("binary read: %+v", r)
	}

	// Images come back as image content.
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)
	call(t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/i.png", "content": base64.StdEncoding.EncodeToString(png), "encoding": "base64"}, false)
	res := call(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/i.png"}, false)
	img, ok := res.Content[0].(*sdk.ImageContent)
	if !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
		t.Fatalf("image read: %#v", res.Content[0])
	}

	// A file whose size reads as 0 but has content (procfs) is read whole.
	call(t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/proc/cpuinfo", "content": "processor\t: 0\n"}, false)
	r = decode[readOut](t, call(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/proc/cpuinfo"}, false))
	if r.Content != "processor\t: 0\n" || !r.EOF || r.Size != int64(len(r.Content)) {
		t.Fatalf("procfs read: %+v", r)
	}

	// A missing file is a tool error that points at list_files.
	res = call(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/work/nope"}, true)
	if !strings.Contains(text(res), "list_files") {
		t.Fatalf("missing file error: %s", text(res))
	}
	wait := decode[waitOut](t, call(t, cs, "wait_for_text", map[string]any{"sandbox_id": sb.ID, "path": "/work/t.txt", "text": "b€a"}, false))
	if !wait.Found {
		t.Fatalf("wait: %+v", wait)
	}
}

func TestSandboxRun(t *testing.T) {
	f := newFake()
	s, cs := connect(t, f)
	first := decode[ExecOut](t, call(t, cs, "sandbox_run", map[string]any{"command": "echo 1"}, false))
	if first.SandboxID == "" || !strings.Contains(first.Note, "created sandbox") {
		t.Fatalf("first run: %+v", first)
	}
	second := decode[ExecOut](t, call(t, cs, "sandbox_run", map[string]any{"command": "echo 2"}, false))
	if second.SandboxID != first.SandboxID || second.Note != "" {
		t.Fatalf("second run made a new sandbox: %+v", second)
	}
	// Other tools use it without a token.
	call(t, cs, "ping_sandbox", map[string]any{"sandbox_id": first.SandboxID}, false)

	// Expired: a new one is made, and the result says so.
	f.DeleteSandbox(context.Background(), first.SandboxID)
	third := decode[ExecOut](t, call(t, cs, "sandbox_run", map[string]any{"command": "echo 3"}, false))
	if third.SandboxID == first.SandboxID || !strings.Contains(third.Note, "was gone") {
		t.Fatalf("run after expiry: %+v", third)
	}

	// The session's end kills its sandbox.
	cs.Close()
	deadline := time.Now().Add(5 * time.Second)
	for f.alive(third.SandboxID) {
		if time.Now().After(deadline) {
			t.Fatal("sandbox_run's sandbox outlived its session")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	n := len(s.sessions)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d sessions left", n)
	}
}

// Close waits for a session's end to be cleaned up after, even when the
// session's own goroutine got to it first: `cove mcp` exits after Close,
// and must not do so in the middle of killing sandbox_run's sandbox.
func TestCloseWaitsForSessionEnd(t *testing.T) {
	f := newFake()
	s, cs := connect(t, f)
	run := decode[ExecOut](t, call(t, cs, "sandbox_run", map[string]any{"command": "echo 1"}, false))
	gate := make(chan struct{})
	f.mu.Lock()
	f.deleteGate = gate
	f.mu.Unlock()
	cs.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		n := len(s.sessions)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's end was never noticed")
		}
	}
	closed := make(chan struct{})
	go func() {
		s.Close(context.Background())
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while the session's sandbox was still being killed")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if f.alive(run.SandboxID) {
		t.Fatal("sandbox_run's sandbox outlived Close")
	}
}

func TestClip(t *testing.T) {
	if s, cut := clip("short", 10); s != "short" || cut {
		t.Fatal(s)
	}
	s, cut := clip(strings.Repeat("€", 100), 40)
	if !cut || !strings.HasPrefix(s, "€€€") || !strings.HasSuffix(s, "€€€") || !strings.Contains(s, "bytes cut") {
		t.Fatalf("%q", s)
	}
	if got := wholeRunes([]byte("a€")[:3]); string(got) != "a" {
		t.Fatalf("%q", got)
	}
}
