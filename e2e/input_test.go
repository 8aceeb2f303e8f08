package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestHostileInput: input that once hung or failed a call (a stdin over
// the agent's frame limit, NUL bytes and huge arguments, a file whose size
// is unknown until read) gets a prompt, clear answer, and what the limits
// allow works.
func TestHostileInput(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	hc := &http.Client{Timeout: 3 * time.Minute} // a hang fails the test, not the suite
	call := func(t *testing.T, method, path, body string) (int, []byte, time.Duration) {
		t.Helper()
		req, err := http.NewRequest(method, d.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+d.key)
		req.Header.Set(apitype.SandboxTokenHeader, sb.token)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v after %s", method, path, err, time.Since(start))
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, time.Since(start)
	}
	execPath := "/v1/sandboxes/" + sb.id + "/exec"

	t.Run("stdin", func(t *testing.T) {
		// 50 MiB passed the body limit, but its encoding exceeded the
		// agent's frame limit and the daemon blocked for good.
		status, b, took := call(t, "POST", execPath, `{"args":["wc","-c"],"stdin":"`+strings.Repeat("a", 50<<20)+`"}`)
		if status != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte(`"too_large"`)) || took > time.Minute {
			t.Fatalf("50 MiB stdin: %d %.300s after %s; want a prompt 413", status, b, took)
		}
		status, b, took = call(t, "POST", execPath, `{"args":["wc","-c"],"stdin":"`+strings.Repeat("a", 40<<20)+`"}`)
		var res apitype.ExecResponse
		json.Unmarshal(b, &res)
		if status != http.StatusOK || strings.TrimSpace(res.Stdout) != "41943040" {
			t.Fatalf("40 MiB stdin: %d %.300s after %s", status, b, took)
		}
		t.Logf("wc -c of 40 MiB of stdin took %s", took)
	})

	t.Run("arguments", func(t *testing.T) {
		for _, tc := range []struct{ name, body, want string }{
			{"NUL in args", `{"args":["echo","a\u0000b"]}`, "args[1] contains a NUL byte"},
			{"NUL in an env key", `{"shell":"true","env":{"K\u0000":"v"}}`, `env key \"K\\x00\": a name must be non-empty and have no '=' or NUL`},
			{"NUL in an env value", `{"shell":"true","env":{"K":"v\u0000"}}`, `env \"K\" contains a NUL byte`},
			{"NUL in shell", `{"shell":"echo \u0000"}`, "shell contains a NUL byte"},
			{"NUL in cwd", `{"shell":"true","cwd":"/tmp\u0000"}`, "cwd contains a NUL byte"},
			{"10 MiB argument", `{"args":["echo","` + strings.Repeat("a", 10<<20) + `"]}`, "args[1] is 10485760 bytes"},
		} {
			status, b, _ := call(t, "POST", execPath, tc.body)
			if status != http.StatusBadRequest || !bytes.Contains(b, []byte(tc.want)) {
				t.Errorf("%s: %d %.300s; want 400 with %q", tc.name, status, b, tc.want)
			}
		}
		// The longest argument the limits allow runs on either kernel.
		longest := strings.Repeat("a", 131071)
		status, b, _ := call(t, "POST", execPath, `{"args":["sh","-c","printf %s \"$1\" | wc -c","sh","`+longest+`"]}`)
		var res apitype.ExecResponse
		if status != http.StatusOK || json.Unmarshal(b, &res) != nil || strings.TrimSpace(res.Stdout) != "131071" {
			t.Errorf("the longest argument: %d %.300s", status, b)
		}
		// The documented edges: list depth, the sandboxd file route.
		list := "/v1/sandboxes/" + sb.id + "/list?path=/work&depth="
		if status, b, _ := call(t, "GET", list+"64", ""); status != http.StatusOK {
			t.Errorf("list depth 64: %d %s", status, b)
		}
		if status, b, _ := call(t, "GET", list+"65", ""); status != http.StatusBadRequest {
			t.Errorf("list depth 65: %d %s", status, b)
		}
		if status, b, _ := call(t, "PUT", "/sandboxes/"+sb.id+"/files/%2Ftmp%2Fabs.txt", "x"); status != http.StatusBadRequest {
			t.Errorf("sandboxd file route with an absolute path: %d %s", status, b)
		}
		if out := execOK(t, d, sb, "echo still fine; ls /tmp/abs.txt 2>&1 || true"); !strings.HasPrefix(out, "still fine\n") || !strings.Contains(out, "No such file") {
			t.Errorf("after bad arguments: %q", out)
		}
		log, _ := os.ReadFile(filepath.Join(d.dir, "daemon.log"))
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "level=ERROR") && strings.Contains(line, sb.id) {
				t.Errorf("bad input logged an error: %s", line)
			}
		}
	})

	t.Run("download of unknown size", func(t *testing.T) {
		want := withoutMHz(execOK(t, d, sb, "cat /proc/cpuinfo"))
		rc, fi, err := d.c.GetFile(context.Background(), sb.id, sb.token, "/proc/cpuinfo")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || want == "" || withoutMHz(string(got)) != want {
			t.Fatalf("GET /proc/cpuinfo (size %d): %d bytes, %v; want the %d that cat prints", fi.Size, len(got), err, len(want))
		}
		cp := exec.Command(suite.bin, "cp", "--sandbox-token", sb.token, sb.id+":/proc/cpuinfo", "-")
		cp.Env = append(os.Environ(), "COVE_URL="+d.url, "COVE_API_KEY="+d.key)
		var stderr bytes.Buffer
		cp.Stderr = &stderr
		out, err := cp.Output()
		if err != nil || withoutMHz(string(out)) != want {
			t.Fatalf("cove cp of /proc/cpuinfo: %d bytes, %v: %s", len(out), err, stderr.String())
		}
	})
}

// withoutMHz drops the lines of /proc/cpuinfo that may change between reads.
func withoutMHz(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "MHz") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// stalledBody is a request whose client sent its headers and half its
// body, then nothing.
type stalledBody struct {
	sent   time.Time
	closed chan time.Time // when the daemon closed the connection
	answer chan string
}

// stallBody sends headers and half a body to an exec of sb, as an
// authenticated client, and watches for the daemon to cut it off.
func stallBody(t *testing.T, d *daemon, sb sandbox) *stalledBody {
	t.Helper()
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &stalledBody{sent: time.Now(), closed: make(chan time.Time, 1), answer: make(chan string, 1)}
	fmt.Fprintf(conn, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: cove\r\nAuthorization: Bearer %s\r\n%s: %s\r\n"+
		"Content-Length: 100\r\n\r\n{\"args\":[", sb.id, d.key, apitype.SandboxTokenHeader, sb.token)
	go func() {
		conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
		b, _ := io.ReadAll(conn)
		s.closed <- time.Now()
		s.answer <- string(b)
	}()
	return s
}

// check waits for the daemon to have cut the stalled request: after about
// the daemon's 30 s body timeout, with a 408, and healthy after.
func (s *stalledBody) check(t *testing.T, d *daemon) {
	t.Helper()
	select {
	case at := <-s.closed:
		took := at.Sub(s.sent)
		if took < 25*time.Second || took > 75*time.Second {
			t.Errorf("a stalled request body was cut after %s, want about 30 s", took)
		}
		if a := <-s.answer; !strings.HasPrefix(a, "HTTP/1.1 408") {
			t.Errorf("answer to a stalled body: %q, want 408", a)
		}
	case <-time.After(time.Until(s.sent.Add(90 * time.Second))):
		t.Errorf("a stalled request body still holds its connection after %s", time.Since(s.sent))
	}
	if err := d.c.Health(context.Background()); err != nil {
		t.Errorf("daemon after a stalled body: %v", err)
	}
}
