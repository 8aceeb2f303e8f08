package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestSandboxdSequence runs sandboxd's documented curl sequence, verbatim
// apart from the auth headers, with the real curl.
func TestSandboxdSequence(t *testing.T) {
	d := suite.shared
	curl := func(args ...string) string {
		t.Helper()
		full := append([]string{"-sS", "--fail-with-body", "-H", "Authorization: Bearer " + d.key}, args...)
		out, err := exec.Command("curl", full...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	var created apitype.CompatCreateResponse
	if err := json.Unmarshal([]byte(curl("-X", "POST", d.url+"/sandboxes")), &created); err != nil || created.ID == "" {
		t.Fatalf("POST /sandboxes: %v %+v", err, created)
	}
	tok := apitype.SandboxTokenHeader + ": " + created.Token
	defer exec.Command("curl", "-sS", "-X", "DELETE", "-H", "Authorization: Bearer "+d.key, d.url+"/sandboxes/"+created.ID).Run()

	got := curl("-X", "POST", "-H", tok, d.url+"/sandboxes/"+created.ID+"/exec",
		"-d", `{"cmd":["python3","-c","print(1+1)"]}`)
	if want := `{"stdout":"2\n","stderr":"","exit_code":0`; !strings.HasPrefix(got, want) {
		t.Fatalf("exec = %s, want prefix %s", got, want)
	}

	src := filepath.Join(t.TempDir(), "a.py")
	os.WriteFile(src, []byte("print('hello from a.py')\n"), 0o644)
	curl("-X", "PUT", "-H", tok, d.url+"/sandboxes/"+created.ID+"/files/a.py", "--data-binary", "@"+src)
	got = curl("-X", "POST", "-H", tok, d.url+"/sandboxes/"+created.ID+"/exec", "-d", `{"cmd":["python3","a.py"]}`)
	if !strings.Contains(got, `"stdout":"hello from a.py\n"`) {
		t.Fatalf("running the uploaded file (relative to /work) = %s", got)
	}

	curl("-X", "DELETE", d.url+"/sandboxes/"+created.ID)
	status, _ := rawCall(t, "GET", d.url+"/v1/sandboxes/"+created.ID, map[string]string{"Authorization": "Bearer " + d.key}, "")
	if status != 404 {
		t.Fatalf("GET after DELETE = %d, want 404", status)
	}
}

func TestExec(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	cases := []struct {
		name     string
		req      apitype.ExecRequest
		stdout   string
		stderr   string
		exitCode int
		timedOut bool
	}{
		{"args", apitype.ExecRequest{Args: []string{"echo", "a b"}}, "a b\n", "", 0, false},
		{"shell", apitype.ExecRequest{Shell: "echo $((6*7)); echo err >&2; exit 3"}, "42\n", "err\n", 3, false},
		{"cwd defaults to /work", apitype.ExecRequest{Args: []string{"pwd"}}, "/work\n", "", 0, false},
		{"cwd", apitype.ExecRequest{Args: []string{"pwd"}, Cwd: "/tmp"}, "/tmp\n", "", 0, false},
		{"env", apitype.ExecRequest{Shell: "echo $FOO", Env: map[string]string{"FOO": "bar"}}, "bar\n", "", 0, false},
		{"stdin", apitype.ExecRequest{Args: []string{"cat"}, Stdin: "piped"}, "piped", "", 0, false},
		{"stdin is /dev/null", apitype.ExecRequest{Args: []string{"cat"}}, "", "", 0, false},
		{"not found", apitype.ExecRequest{Args: []string{"no-such-command"}}, "", "", 127, false},
		{"timeout", apitype.ExecRequest{Shell: "echo started; sleep 30", TimeoutSecs: 0.5}, "started\n", "", -1, true},
		{"tools in image", apitype.ExecRequest{Shell: "node -e 'console.log(1+2)' && git --version >/dev/null && curl --version >/dev/null && ps >/dev/null && ip addr >/dev/null && pip --version >/dev/null && echo ok"}, "3\nok\n", "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.c.Exec(ctx, sb.id, sb.token, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != tc.stdout || res.ExitCode != tc.exitCode || res.TimedOut != tc.timedOut ||
				(tc.stderr != "" && res.Stderr != tc.stderr) {
				t.Fatalf("got %+v, want stdout %q stderr %q exit %d timedOut %v", res, tc.stdout, tc.stderr, tc.exitCode, tc.timedOut)
			}
		})
	}
	t.Run("timeout kills the process group", func(t *testing.T) {
		res, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: "sleep 300 & sleep 300", TimeoutSecs: 0.5})
		if err != nil || !res.TimedOut {
			t.Fatalf("exec = %+v, %v", res, err)
		}
		if out := execOK(t, d, sb, "ps -eo comm | grep -c '^sleep' || true"); strings.TrimSpace(out) != "0" {
			t.Fatalf("sleep processes left after timeout: %s", out)
		}
	})
}

func TestEvalKeepsState(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	steps := []struct {
		code, result, stdout string
		exitCode             int
	}{
		{"x = 40", "", "", 0},
		{"x + 2", "42", "", 0},
		{"print('hi'); x", "40", "hi\n", 0},
		{"import json\njson.dumps({'a': x})", `'{"a": 40}'`, "", 0},
		{"1/0", "", "", 1},
		{"x", "40", "", 0},
	}
	for _, s := range steps {
		res, err := d.c.Eval(ctx, sb.id, sb.token, apitype.EvalRequest{Code: s.code})
		if err != nil {
			t.Fatalf("eval %q: %v", s.code, err)
		}
		if res.Result != s.result || res.Stdout != s.stdout || res.ExitCode != s.exitCode {
			t.Fatalf("eval %q = %+v, want result %q stdout %q exit %d", s.code, res, s.result, s.stdout, s.exitCode)
		}
		if s.exitCode != 0 && !strings.Contains(res.Error, "ZeroDivisionError") {
			t.Fatalf("eval %q: error %q should name the exception", s.code, res.Error)
		}
	}
}

func TestFilesListAndWait(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	if _, err := d.c.PutFile(ctx, sb.id, sb.token, "dir/sub/run.sh", 0o755, strings.NewReader("#!/bin/sh\necho ran\n"), -1); err != nil {
		t.Fatal(err)
	}
	if out := execOK(t, d, sb, "./dir/sub/run.sh && stat -c %a dir/sub/run.sh"); out != "ran\n755\n" {
		t.Fatalf("uploaded script: %q", out)
	}
	// Ranges: query parameters and a Range header.
	rc, fi, err := d.c.GetFileRange(ctx, sb.id, sb.token, "dir/sub/run.sh", 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(rc)
	rc.Close()
	if string(part) != "bin" || fi.Size != 19 {
		t.Fatalf("range read: %q of %d bytes", part, fi.Size)
	}
	status, body := rawCall(t, "GET", d.url+"/v1/sandboxes/"+sb.id+"/files?path=dir/sub/run.sh",
		map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: sb.token, "Range": "bytes=10-"}, "")
	if status != 206 || string(body) != "echo ran\n" {
		t.Fatalf("Range bytes=10-: %d %q", status, body)
	}
	list, err := d.c.ListFiles(ctx, sb.id, sb.token, "/work", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list.Entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	if got, want := strings.Join(paths, " "), "/work/dir:dir /work/dir/sub:dir /work/dir/sub/run.sh:file"; got != want {
		t.Fatalf("list = %s, want %s", got, want)
	}

	// A background command writes the marker later; wait sees it.
	execOK(t, d, sb, "(sleep 1; echo READY-MARKER >> /tmp/log) > /dev/null 2>&1 &")
	start := time.Now()
	res, err := d.c.Wait(ctx, sb.id, sb.token, apitype.WaitRequest{Path: "/tmp/log", Text: "READY-MARKER", TimeoutSecs: 20})
	if err != nil || !res.Found {
		t.Fatalf("wait = %+v, %v", res, err)
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("wait returned before the marker could have been written")
	}
	res, err = d.c.Wait(ctx, sb.id, sb.token, apitype.WaitRequest{Path: "/tmp/log", Text: "NEVER", TimeoutSecs: 0.3})
	if err != nil || res.Found {
		t.Fatalf("wait for a missing marker = %+v, %v; want found=false", res, err)
	}
}

// TestBadInput: every bad request gets a JSON error with the right status
// and changes nothing.
func TestBadInput(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	auth := map[string]string{"Authorization": "Bearer " + d.key}
	withTok := func(tok string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: tok}
	}
	good := withTok(sb.token)
	u := d.url
	cases := []struct {
		name, method, path string
		headers            map[string]string
		body               string
		status             int
	}{
		{"unknown id", "GET", "/v1/sandboxes/sb-000000000000", auth, "", 404},
		{"unknown id exec", "POST", "/v1/sandboxes/sb-000000000000/exec", good, `{"args":["true"]}`, 404},
		{"unknown id delete", "DELETE", "/v1/sandboxes/sb-000000000000", auth, "", 404},
		{"malformed JSON create", "POST", "/v1/sandboxes", auth, `{"n":`, 400},
		{"malformed JSON exec", "POST", "/v1/sandboxes/" + sb.id + "/exec", good, `{args:`, 400},
		{"unknown field", "POST", "/v1/sandboxes", auth, `{"ttl":5}`, 400},
		{"missing API key", "GET", "/v1/sandboxes", nil, "", 401},
		{"wrong API key", "GET", "/v1/sandboxes", map[string]string{"Authorization": "Bearer nope"}, "", 401},
		{"wrong API key on data plane", "POST", "/v1/sandboxes/" + sb.id + "/exec", map[string]string{"Authorization": "Bearer nope", apitype.SandboxTokenHeader: sb.token}, `{"args":["true"]}`, 401},
		{"wrong sandbox token", "POST", "/v1/sandboxes/" + sb.id + "/exec", withTok("wrong"), `{"args":["true"]}`, 403},
		{"missing sandbox token", "POST", "/v1/sandboxes/" + sb.id + "/exec", auth, `{"args":["true"]}`, 403},
		{"negative ttl", "POST", "/v1/sandboxes", auth, `{"ttl_secs":-1}`, 400},
		{"huge ttl", "POST", "/v1/sandboxes", auth, `{"ttl_secs":9223372036854775807}`, 400},
		{"negative cpus", "POST", "/v1/sandboxes", auth, `{"cpus":-1}`, 400},
		{"huge cpus", "POST", "/v1/sandboxes", auth, `{"cpus":100000}`, 400},
		{"negative memory", "POST", "/v1/sandboxes", auth, `{"memory_mib":-5}`, 400},
		{"huge memory", "POST", "/v1/sandboxes", auth, `{"memory_mib":100000000}`, 400},
		{"negative disk", "POST", "/v1/sandboxes", auth, `{"disk_mib":-512}`, 400},
		{"huge disk", "POST", "/v1/sandboxes", auth, `{"disk_mib":100000000}`, 400},
		{"negative pids", "POST", "/v1/sandboxes", auth, `{"pids":-1}`, 400},
		{"huge pids", "POST", "/v1/sandboxes", auth, `{"pids":100000000}`, 400},
		{"n too big", "POST", "/v1/sandboxes", auth, `{"n":1001}`, 400},
		{"n negative", "POST", "/v1/sandboxes", auth, `{"n":-1}`, 400},
		{"unknown snapshot", "POST", "/v1/sandboxes", auth, `{"snapshot_tag":"nope"}`, 404},
		{"negative extend", "POST", "/v1/sandboxes/" + sb.id + "/extend", auth, `{"ttl_secs":-5}`, 400},
		{"huge extend", "POST", "/v1/sandboxes/" + sb.id + "/extend", auth, `{"ttl_secs":99999999999}`, 400},
		{"negative exec timeout", "POST", "/v1/sandboxes/" + sb.id + "/exec", good, `{"args":["true"],"timeout_secs":-1}`, 400},
		{"empty exec", "POST", "/v1/sandboxes/" + sb.id + "/exec", good, `{}`, 400},
		{"args and shell", "POST", "/v1/sandboxes/" + sb.id + "/exec", good, `{"args":["true"],"shell":"true"}`, 400},
		{"empty eval", "POST", "/v1/sandboxes/" + sb.id + "/eval", good, `{"code":""}`, 400},
		{"traversal get", "GET", "/v1/sandboxes/" + sb.id + "/files?path=../../etc/passwd", good, "", 400},
		{"traversal put", "PUT", "/v1/sandboxes/" + sb.id + "/files?path=/work/../../x", good, "data", 400},
		{"bad mode", "PUT", "/v1/sandboxes/" + sb.id + "/files?path=x&mode=999", good, "data", 400},
		{"missing file", "GET", "/v1/sandboxes/" + sb.id + "/files?path=/nope", good, "", 404},
		{"directory as file", "GET", "/v1/sandboxes/" + sb.id + "/files?path=/etc", good, "", 400},
		{"bad depth", "GET", "/v1/sandboxes/" + sb.id + "/list?path=/&depth=-1", good, "", 400},
		{"wait without text", "POST", "/v1/sandboxes/" + sb.id + "/wait", good, `{"path":"/tmp/x"}`, 400},
		{"unknown route", "GET", "/v2/nothing", auth, "", 404},
	}
	before, _ := d.c.ListSandboxes(context.Background())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawCall(t, tc.method, u+tc.path, tc.headers, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d; body %s", status, tc.status, body)
			}
			var e apitype.ErrorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Fatalf("body %q is not a JSON error: %v", body, err)
			}
		})
	}
	after, _ := d.c.ListSandboxes(context.Background())
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("bad requests changed state:\nbefore %+v\nafter  %+v", before, after)
	}
	if out := execOK(t, d, sb, "echo still fine"); out != "still fine\n" {
		t.Fatalf("sandbox broken after bad input: %q", out)
	}
}
