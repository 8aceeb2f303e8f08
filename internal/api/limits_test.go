package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// syncBuffer is a log sink for a server under test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func logTo(b *syncBuffer) func(*Config) {
	return func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(b, nil)) }
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExecInputLimits: a command line no kernel would run, and input over
// the limits that hold end to end, are refused at once with a 4xx naming
// the field, never a 500 or a hang; the limits themselves work.
func TestExecInputLimits(t *testing.T) {
	var log syncBuffer
	s := newServer(t, logTo(&log))
	sb := s.create(t)
	longest := strings.Repeat("a", agentproto.MaxArg)
	const bad, big = apitype.CodeBadRequest, apitype.CodeTooLarge
	tests := []struct {
		name, body string
		status     int
		code, want string
		heavy      bool // tens of MiB of JSON
	}{
		{"NUL in an argument", `{"args":["echo","a\u0000b"]}`, 400, bad, "args[1] contains a NUL byte", false},
		{"NUL in cmd", `{"cmd":["ech\u0000o"]}`, 400, bad, "args[0] contains a NUL byte", false},
		{"NUL in shell", `{"shell":"echo \u0000"}`, 400, bad, "shell contains a NUL byte", false},
		{"NUL in cwd", `{"shell":"true","cwd":"/tmp\u0000"}`, 400, bad, "cwd contains a NUL byte", false},
		{"NUL in an env value", `{"shell":"true","env":{"K":"v\u0000"}}`, 400, bad, `env "K" contains a NUL byte`, false},
		{"NUL in an env key", `{"shell":"true","env":{"K\u0000":"v"}}`, 400, bad, `env key "K\x00": a name must be non-empty and have no '=' or NUL`, false},
		{"= in an env key", `{"shell":"true","env":{"A=B":"v"}}`, 400, bad, `env key "A=B"`, false},
		{"empty env key", `{"shell":"true","env":{"":"v"}}`, 400, bad, `env key ""`, false},
		{"1 MiB argument", jsonString(t, apitype.ExecRequest{Args: []string{"echo", strings.Repeat("a", 1<<20)}}), 400, bad, "args[1] is 1048576 bytes", false},
		{"1 MiB shell", jsonString(t, apitype.ExecRequest{Shell: strings.Repeat("a", 1<<20)}), 400, bad, "shell is 1048576 bytes", false},
		{"1 MiB env value", jsonString(t, apitype.ExecRequest{Shell: "true", Env: map[string]string{"BIG": strings.Repeat("a", 1<<20)}}), 400, bad, `env "BIG" is`, false},
		{"command line over the total", jsonString(t, apitype.ExecRequest{Args: []string{"true", longest, longest, longest, longest, longest, longest, longest, longest}}), 400, bad, "together", false},
		{"50 MiB stdin", `{"args":["wc","-c"],"stdin":"` + strings.Repeat("a", 50<<20) + `"}`, 413, big, "stdin is 52428800 bytes", true},
		{"body over 64 MiB", `{"args":["wc","-c"],"stdin":"` + strings.Repeat("a", 65<<20) + `"}`, 413, big, "request body over", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.heavy && raceDetector {
				t.Skip("too slow under the race detector: e2e TestExecStdinLimits covers it")
			}
			resp, b := s.doString(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", tc.body, tok(sb))
			var eb apitype.ErrorBody
			json.Unmarshal(b, &eb)
			if resp.StatusCode != tc.status || eb.Code != tc.code || !strings.Contains(eb.Error, tc.want) {
				t.Fatalf("%d %.300s; want %d %s with %q", resp.StatusCode, b, tc.status, tc.code, tc.want)
			}
		})
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("bad input logged errors:\n%.2000s", log.String())
	}

	// What the limits allow works.
	if !raceDetector {
		res := s.exec(t, sb, `{"args":["wc","-c"],"stdin":"`+strings.Repeat("a", 40<<20)+`"}`)
		if strings.TrimSpace(res.Stdout) != "41943040" {
			t.Errorf("wc -c of a 40 MiB stdin = %+v", res)
		}
	}
	res := s.exec(t, sb, jsonString(t, apitype.ExecRequest{Args: []string{"sh", "-c", `printf %s "$1" | wc -c`, "sh", longest}}))
	if strings.TrimSpace(res.Stdout) != fmt.Sprint(agentproto.MaxArg) {
		t.Errorf("the longest argument: %+v", res)
	}
}

// putHostFile writes a file at an absolute host path, which the fake
// runtime's agent reads as a path of its sandbox.
func putHostFile(t *testing.T, size int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(p, bytes.Repeat([]byte("x"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// get starts a GET and returns the response, its body unread.
func (s *testServer) get(t *testing.T, path string, h hdr) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return resp
}

// TestGetFileUnknownSize: a file whose size is not known when it is opened
// (procfs says 0) or that grows while it is read comes whole, without a
// Content-Length.
func TestGetFileUnknownSize(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	files := "/v1/sandboxes/" + sb.ID + "/files?path="

	// The fake's agent reads the host's procfs, whose cpuinfo changes only
	// in its MHz lines.
	resp := s.get(t, files+"/proc/cpuinfo", tok(sb))
	got, err := io.ReadAll(resp.Body)
	want, _ := os.ReadFile("/proc/cpuinfo")
	noMHz := func(b []byte) string {
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "MHz") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if err != nil || len(got) == 0 || noMHz(got) != noMHz(want) {
		t.Fatalf("GET /proc/cpuinfo: %d bytes, %v; want the %d of the file", len(got), err, len(want))
	}
	if fs := resp.Header.Get("X-File-Size"); fs != "0" {
		t.Errorf("X-File-Size %q, want procfs's 0", fs)
	}

	// Far more than the buffers between the agent and the client, so the
	// agent is still reading when the file grows.
	const size = 64 << 20
	p := putHostFile(t, size)
	resp = s.get(t, files+p, tok(sb))
	if resp.ContentLength != -1 {
		t.Errorf("Content-Length %d for a whole file, want none", resp.ContentLength)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte("y"), 1<<20))
	f.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if got, want := n+1<<20, int64(size+1<<20); err != nil || got != want {
		t.Fatalf("a file that grew while read: got %d bytes, %v; want %d", got, err, want)
	}
}

// TestGetFileShrinks: a file cut short while it is read gives what is
// there when read whole, and an error (a cut connection) when a range of
// it was promised.
func TestGetFileShrinks(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	const size = 64 << 20
	for _, ranged := range []bool{false, true} {
		t.Run(fmt.Sprintf("ranged=%v", ranged), func(t *testing.T) {
			p := putHostFile(t, size)
			path := "/v1/sandboxes/" + sb.ID + "/files?path=" + p
			if ranged {
				path += fmt.Sprintf("&offset=0&length=%d", size)
			}
			resp := s.get(t, path, tok(sb))
			if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, size/2); err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			n += 1 << 20
			switch {
			case ranged && err == nil:
				t.Fatalf("a range cut short by %d bytes came without an error", size-n)
			case !ranged && (err != nil || n != size/2):
				t.Fatalf("whole file: %d bytes, %v; want the %d left", n, err, size/2)
			}
		})
	}
}

// TestBodyStall: a client that sends its headers and half a body is cut
// off once the body stalls, with or without a key; one that sends slowly
// but steadily is not; the server carries on.
func TestBodyStall(t *testing.T) {
	const idle = 300 * time.Millisecond
	var log syncBuffer
	s := newServer(t, logTo(&log), func(c *Config) { c.BodyIdleTimeout = idle })
	sb := s.create(t)
	addr := strings.TrimPrefix(s.url, "http://")
	tests := []struct {
		name, head, status string
	}{
		{"exec", "POST /v1/sandboxes/" + sb.ID + "/exec HTTP/1.1\r\nAuthorization: Bearer " + testKey +
			"\r\nX-Sandbox-Token: " + sb.Token + "\r\nContent-Length: 100\r\n\r\n{\"args\":", "408"},
		{"upload", "PUT /v1/sandboxes/" + sb.ID + "/files?path=half.bin HTTP/1.1\r\nAuthorization: Bearer " + testKey +
			"\r\nX-Sandbox-Token: " + sb.Token + "\r\nContent-Length: 1000000\r\n\r\nsome of it", "408"},
		{"chunked upload", "PUT /v1/sandboxes/" + sb.ID + "/files?path=half.bin HTTP/1.1\r\nAuthorization: Bearer " + testKey +
			"\r\nX-Sandbox-Token: " + sb.Token + "\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nsome of it", "408"},
		{"create", "POST /v1/sandboxes HTTP/1.1\r\nAuthorization: Bearer " + testKey + "\r\nContent-Length: 100\r\n\r\n{\"n\":", "408"},
		{"no key", "POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"n\":", "401"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, strings.Replace(tc.head, "\r\n", "\r\nHost: cove\r\n", 1)); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			all, err := io.ReadAll(conn) // to the server's close
			took := time.Since(start)
			if err != nil {
				t.Fatalf("connection still open after %s: %v (read %q)", took, err, all)
			}
			if took < idle || took > 5*time.Second {
				t.Errorf("closed after %s, want about %s", took, idle)
			}
			if !strings.HasPrefix(string(all), "HTTP/1.1 "+tc.status) {
				t.Errorf("answer %q, want %s", all, tc.status)
			}
		})
	}

	// Slow but steady: every gap is shorter than the idle timeout, the
	// whole upload longer.
	pr, pw := io.Pipe()
	go func() {
		for range 10 {
			pw.Write([]byte("0123456789"))
			time.Sleep(idle / 3)
		}
		pw.Close()
	}()
	var fi apitype.FileInfo
	resp, b := s.do(t, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=slow.bin", bufio.NewReader(pr), tok(sb))
	if err := json.Unmarshal(b, &fi); resp.StatusCode != http.StatusOK || err != nil || fi.Size != 100 {
		t.Fatalf("slow upload: %d %s", resp.StatusCode, b)
	}
	// A long call after its body is read is not cut.
	if res := s.exec(t, sb, fmt.Sprintf(`{"args":["sleep","%.1f"]}`, (3*idle).Seconds())); res.ExitCode != 0 {
		t.Errorf("a call longer than the idle timeout: %+v", res)
	}
	s.call(t, "GET", "/healthz", "", nil, http.StatusOK, nil)
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("stalled bodies logged errors:\n%.2000s", log.String())
	}
}

// TestDocumentedRules: what docs/API.md says of n, list depth and the
// sandboxd file route.
func TestDocumentedRules(t *testing.T) {
	s := newServer(t)
	for _, body := range []string{"", "null", "{}", `{"n":0}`} {
		var out []apitype.SandboxInfo
		s.call(t, "POST", "/v1/sandboxes", body, nil, http.StatusCreated, &out)
		if len(out) != 1 {
			t.Errorf("create with %q made %d sandboxes, want 1", body, len(out))
		}
	}
	sb := s.create(t)
	list := "/v1/sandboxes/" + sb.ID + "/list?path=.&depth="
	s.call(t, "GET", list+"64", "", tok(sb), http.StatusOK, nil)
	s.call(t, "GET", list+"65", "", tok(sb), http.StatusBadRequest, nil)

	compat := "/sandboxes/" + sb.ID + "/files/"
	s.call(t, "PUT", compat+"%2Ftmp%2Fabs.txt", "x", tok(sb), http.StatusBadRequest, nil)
	s.call(t, "PUT", compat+"%2F%2Ftmp%2Fabs.txt", "x", tok(sb), http.StatusBadRequest, nil)
	s.call(t, "PUT", compat+"rel%2Fa.txt", "x", tok(sb), http.StatusOK, nil)
	var res apitype.ExecResponse
	s.call(t, "POST", "/sandboxes/"+sb.ID+"/exec", `{"cmd":["cat","rel/a.txt"]}`, tok(sb), http.StatusOK, &res)
	if res.Stdout != "x" {
		t.Errorf("the file written by the sandboxd route: %+v", res)
	}
}

// TestRangeHoldingNothing: a range that holds no byte of the file (any
// range of an empty file, one starting at its end) is a 416 naming the
// file's size, not a 206 with an impossible Content-Range.
func TestRangeHoldingNothing(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	empty, five := putHostFile(t, 0), putHostFile(t, 5)
	for _, tc := range []struct {
		name, file, query string
		h                 hdr
		status            int
		contentRange      string
	}{
		{"empty file, offset and length", empty, "&offset=0&length=10", nil, http.StatusRequestedRangeNotSatisfiable, "bytes */0"},
		{"empty file, Range header", empty, "", hdr{"Range": "bytes=0-"}, http.StatusRequestedRangeNotSatisfiable, "bytes */0"},
		{"at the end", five, "&offset=5", nil, http.StatusRequestedRangeNotSatisfiable, "bytes */5"},
		{"the whole file", five, "&offset=0&length=5", nil, http.StatusPartialContent, "bytes 0-4/5"},
		{"its last byte", five, "", hdr{"Range": "bytes=4-"}, http.StatusPartialContent, "bytes 4-4/5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tok(sb)
			for k, v := range tc.h {
				h[k] = v
			}
			resp, body := s.doString(t, "GET", "/v1/sandboxes/"+sb.ID+"/files?path="+tc.file+tc.query, "", h)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Range") != tc.contentRange {
				t.Errorf("%d, Content-Range %q, %s; want %d, %q", resp.StatusCode, resp.Header.Get("Content-Range"), body, tc.status, tc.contentRange)
			}
		})
	}
}
