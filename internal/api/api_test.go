package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

const testKey = "test-api-key"

var testLimits = sandbox.Limits{
	DefaultTTL:       10 * time.Minute,
	MaxTTL:           time.Hour,
	DefaultCPUs:      1,
	MaxCPUs:          4,
	DefaultMemoryMiB: 256,
	MaxMemoryMiB:     2048,
	MaxSandboxes:     10,
	DefaultDiskMiB:   1024,
	MaxDiskMiB:       4096,
	DefaultPids:      256,
	MaxPids:          1024,
}

// testServer is the API over a sandbox service on the fake runtime.
type testServer struct {
	url string
	svc *sandbox.Service
	rt  *runtimetest.Fake
	net *fakeNetwork
	cfg Config
}

// newServer starts the API over a fresh service; opts adjust its Config.
func newServer(t *testing.T, opts ...func(*Config)) *testServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := runtimetest.New(t)
	log := slog.New(slog.DiscardHandler)
	fnet := newFakeNetwork()
	svc := sandbox.New(sandbox.Config{
		Runtime: rt, Store: st, Images: runtimetest.NewImages(map[string]string{"default": "default-0001"}), DefaultImage: "default",
		Limits: testLimits, Logger: log, StartTimeout: 5 * time.Second, SnapshotDir: filepath.Join(t.TempDir(), "snapshots"),
		Network: fnet,
	})
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv := httptest.NewUnstartedServer(nil)
	cfg := Config{Service: svc, APIKey: testKey, Version: "v-test", Logger: log,
		Info: func(ctx context.Context) apitype.Info {
			return apitype.Info{Version: "v-test", Backend: svc.Backend(), Sandboxes: svc.Count()}
		},
		PreviewPort: srv.Listener.Addr().(*net.TCPAddr).Port,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv.Config.Handler = New(cfg)
	srv.Start()
	t.Cleanup(srv.Close)
	return &testServer{url: srv.URL, svc: svc, rt: rt, net: fnet, cfg: cfg}
}

// hdr is a request's headers. The API key is sent unless Authorization
// is given, even as "".
type hdr map[string]string

// do sends a request and returns the response with its whole body.
func (s *testServer) do(t *testing.T, method, path string, body io.Reader, h hdr) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h["Authorization"]; !ok {
		req.Header.Set("Authorization", "Bearer "+testKey)
	}
	for k, v := range h {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// doString is do with a string body; "" sends none.
func (s *testServer) doString(t *testing.T, method, path, body string, h hdr) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return s.do(t, method, path, r, h)
}

// call sends a request with a string body and wants the status; it
// decodes a JSON answer into out when out is not nil.
func (s *testServer) call(t *testing.T, method, path, body string, h hdr, want int, out any) []byte {
	t.Helper()
	resp, b := s.doString(t, method, path, body, h)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return b
}

// create makes one sandbox through the API.
func (s *testServer) create(t *testing.T) apitype.SandboxInfo {
	t.Helper()
	var out []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{}`, nil, http.StatusCreated, &out)
	if len(out) != 1 || out[0].Token == "" {
		t.Fatalf("create = %+v", out)
	}
	return out[0]
}

func tok(info apitype.SandboxInfo) hdr { return hdr{apitype.SandboxTokenHeader: info.Token} }

func (s *testServer) exec(t *testing.T, info apitype.SandboxInfo, body string) apitype.ExecResponse {
	t.Helper()
	var out apitype.ExecResponse
	s.call(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", body, tok(info), http.StatusOK, &out)
	return out
}

func TestErrors(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	other := s.create(t)
	s.call(t, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=f.txt", "x", tok(sb), http.StatusOK, nil)
	s.call(t, "POST", "/v1/snapshots", `{"tag":"dup","warm":"true","pool_size":0}`, nil, http.StatusCreated, nil)
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/snapshot", `{"tag":"mine"}`, tok(sb), http.StatusCreated, nil)

	const unknown = "sb-000000000000"
	exec := "/v1/sandboxes/" + sb.ID + "/exec"
	files := "/v1/sandboxes/" + sb.ID + "/files"
	tests := []struct {
		name, method, path, body string
		h                        hdr
		wantStatus               int
		wantCode                 string
	}{
		// 401
		{"no API key", "GET", "/v1/sandboxes", "", hdr{"Authorization": ""}, 401, apitype.CodeUnauthorized},
		{"wrong API key", "GET", "/v1/sandboxes", "", hdr{"Authorization": "Bearer nope"}, 401, apitype.CodeUnauthorized},
		{"empty bearer", "GET", "/v1/sandboxes", "", hdr{"Authorization": "Bearer "}, 401, apitype.CodeUnauthorized},
		{"not bearer", "GET", "/v1/sandboxes", "", hdr{"Authorization": "Basic " + testKey}, 401, apitype.CodeUnauthorized},
		{"key's prefix", "GET", "/v1/sandboxes", "", hdr{"Authorization": "Bearer " + testKey[:4]}, 401, apitype.CodeUnauthorized},
		{"no API key on metrics", "GET", "/metrics", "", hdr{"Authorization": ""}, 401, apitype.CodeUnauthorized},
		{"no API key on compat create", "POST", "/sandboxes", "", hdr{"Authorization": ""}, 401, apitype.CodeUnauthorized},
		{"data plane: token but no API key", "POST", exec, `{"shell":"true"}`,
			hdr{"Authorization": "", apitype.SandboxTokenHeader: sb.Token}, 401, apitype.CodeUnauthorized},

		// 403
		{"no sandbox token", "POST", exec, `{"shell":"true"}`, nil, 403, apitype.CodeForbidden},
		{"wrong sandbox token", "POST", exec, `{"shell":"true"}`, hdr{apitype.SandboxTokenHeader: "nope"}, 403, apitype.CodeForbidden},
		{"another sandbox's token", "GET", files + "?path=f.txt", "", tok(other), 403, apitype.CodeForbidden},
		{"wrong token in the alternative header", "POST", exec, `{"shell":"true"}`,
			hdr{apitype.SandboxTokenHeaderAlt: other.Token}, 403, apitype.CodeForbidden},
		{"compat: wrong token", "PUT", "/sandboxes/" + sb.ID + "/files/a.txt", "x", tok(other), 403, apitype.CodeForbidden},
		{"branch without the sandbox token", "POST", "/v1/sandboxes/" + sb.ID + "/branch", `{"n":1}`, nil, 403, apitype.CodeForbidden},
		{"branch with another sandbox's token", "POST", "/v1/sandboxes/" + sb.ID + "/branch", `{"n":1}`, tok(other), 403, apitype.CodeForbidden},
		{"snapshot without the sandbox token", "POST", "/v1/sandboxes/" + sb.ID + "/snapshot", `{}`, nil, 403, apitype.CodeForbidden},
		{"snapshot with another sandbox's token", "POST", "/v1/sandboxes/" + sb.ID + "/snapshot", `{}`,
			hdr{apitype.SandboxTokenHeaderAlt: other.Token}, 403, apitype.CodeForbidden},
		{"spawn from a sandbox's snapshot without its token", "POST", "/v1/sandboxes", `{"snapshot_tag":"mine"}`, nil, 403, apitype.CodeForbidden},
		{"spawn from a sandbox's snapshot with another token", "POST", "/v1/sandboxes", `{"snapshot_tag":"mine"}`, tok(other), 403, apitype.CodeForbidden},
		{"compat: spawn from a sandbox's snapshot without its token", "POST", "/sandboxes", `{"snapshot_tag":"mine"}`, nil, 403, apitype.CodeForbidden},

		// 404
		{"unknown sandbox", "GET", "/v1/sandboxes/" + unknown, "", nil, 404, apitype.CodeNotFound},
		{"delete unknown sandbox", "DELETE", "/v1/sandboxes/" + unknown, "", nil, 404, apitype.CodeNotFound},
		{"extend unknown sandbox", "POST", "/v1/sandboxes/" + unknown + "/extend", `{"ttl_secs":60}`, nil, 404, apitype.CodeNotFound},
		{"exec in unknown sandbox", "POST", "/v1/sandboxes/" + unknown + "/exec", `{"shell":"true"}`, tok(sb), 404, apitype.CodeNotFound},
		{"unknown route", "GET", "/v1/nope", "", nil, 404, apitype.CodeNotFound},
		{"unknown route without a key", "GET", "/nope", "", hdr{"Authorization": ""}, 404, apitype.CodeNotFound},
		{"wrong method", "PATCH", "/v1/sandboxes/" + sb.ID, "", nil, 404, apitype.CodeNotFound},
		{"unknown snapshot", "GET", "/v1/snapshots/nope", "", nil, 404, apitype.CodeNotFound},
		{"spawn unknown snapshot", "POST", "/v1/sandboxes", `{"snapshot_tag":"nope"}`, nil, 404, apitype.CodeNotFound},
		{"unknown image", "POST", "/v1/sandboxes", `{"image":"nope"}`, nil, 404, apitype.CodeNotFound},
		{"missing file", "GET", files + "?path=missing.txt", "", tok(sb), 404, apitype.CodeNotFound},

		// 400
		{"malformed JSON", "POST", "/v1/sandboxes", `{`, nil, 400, apitype.CodeBadRequest},
		{"not an object", "POST", "/v1/sandboxes", `[]`, nil, 400, apitype.CodeBadRequest},
		{"unknown field", "POST", "/v1/sandboxes", `{"nope":1}`, nil, 400, apitype.CodeBadRequest},
		{"misspelt field", "POST", "/v1/sandboxes", `{"ttl":60}`, nil, 400, apitype.CodeBadRequest},
		{"data after the object", "POST", "/v1/sandboxes", `{} {}`, nil, 400, apitype.CodeBadRequest},
		{"wrong type", "POST", "/v1/sandboxes", `{"n":"2"}`, nil, 400, apitype.CodeBadRequest},
		{"ttl negative", "POST", "/v1/sandboxes", `{"ttl_secs":-1}`, nil, 400, apitype.CodeBadRequest},
		{"ttl over max", "POST", "/v1/sandboxes", `{"ttl_secs":3601}`, nil, 400, apitype.CodeBadRequest},
		{"n negative", "POST", "/v1/sandboxes", `{"n":-1}`, nil, 400, apitype.CodeBadRequest},
		{"n over max", "POST", "/v1/sandboxes", `{"n":1001}`, nil, 400, apitype.CodeBadRequest},
		{"cpus over max", "POST", "/v1/sandboxes", `{"cpus":5}`, nil, 400, apitype.CodeBadRequest},
		{"memory under min", "POST", "/v1/sandboxes", `{"memory_mib":63}`, nil, 400, apitype.CodeBadRequest},
		{"disk negative", "POST", "/v1/sandboxes", `{"disk_mib":-512}`, nil, 400, apitype.CodeBadRequest},
		{"disk over max", "POST", "/v1/sandboxes", `{"disk_mib":4097}`, nil, 400, apitype.CodeBadRequest},
		{"pids negative", "POST", "/v1/sandboxes", `{"pids":-1}`, nil, 400, apitype.CodeBadRequest},
		{"pids over max", "POST", "/v1/sandboxes", `{"pids":1025}`, nil, 400, apitype.CodeBadRequest},
		{"snapshot disk over max", "POST", "/v1/snapshots", `{"tag":"t","disk_mib":4097}`, nil, 400, apitype.CodeBadRequest},
		{"compat: bad ttl", "POST", "/sandboxes", `{"ttl_secs":-5}`, nil, 400, apitype.CodeBadRequest},
		{"compat: n > 1", "POST", "/sandboxes", `{"n":3}`, nil, 400, apitype.CodeBadRequest},
		{"extend without a body", "POST", "/v1/sandboxes/" + sb.ID + "/extend", "", nil, 400, apitype.CodeBadRequest},
		{"extend ttl zero", "POST", "/v1/sandboxes/" + sb.ID + "/extend", `{"ttl_secs":0}`, nil, 400, apitype.CodeBadRequest},
		{"extend ttl negative", "POST", "/v1/sandboxes/" + sb.ID + "/extend", `{"ttl_secs":-1}`, nil, 400, apitype.CodeBadRequest},
		{"extend ttl over max", "POST", "/v1/sandboxes/" + sb.ID + "/extend", `{"ttl_secs":3601}`, nil, 400, apitype.CodeBadRequest},
		{"exec without a body", "POST", exec, "", tok(sb), 400, apitype.CodeBadRequest},
		{"exec negative timeout", "POST", exec, `{"shell":"true","timeout_secs":-1}`, tok(sb), 400, apitype.CodeBadRequest},
		{"exec timeout over max", "POST", exec, `{"shell":"true","timeout_secs":1e12}`, tok(sb), 400, apitype.CodeBadRequest},
		{"exec no command", "POST", exec, `{}`, tok(sb), 400, apitype.CodeBadRequest},
		{"exec args and cmd", "POST", exec, `{"args":["true"],"cmd":["true"]}`, tok(sb), 400, apitype.CodeBadRequest},
		{"exec args and shell", "POST", exec, `{"args":["true"],"shell":"true"}`, tok(sb), 400, apitype.CodeBadRequest},
		{"exec unknown field", "POST", exec, `{"shell":"true","timeout":1}`, tok(sb), 400, apitype.CodeBadRequest},
		{"eval empty", "POST", "/v1/sandboxes/" + sb.ID + "/eval", `{"code":""}`, tok(sb), 400, apitype.CodeBadRequest},
		{"put '..' path", "PUT", files + "?path=../escape.txt", "x", tok(sb), 400, apitype.CodeBadRequest},
		{"put '..' inside a path", "PUT", files + "?path=a/../../b", "x", tok(sb), 400, apitype.CodeBadRequest},
		{"put no path", "PUT", files, "x", tok(sb), 400, apitype.CodeBadRequest},
		{"get '..' path", "GET", files + "?path=a/../f.txt", "", tok(sb), 400, apitype.CodeBadRequest},
		{"put mode not octal", "PUT", files + "?path=m.txt&mode=999", "x", tok(sb), 400, apitype.CodeBadRequest},
		{"put mode not a number", "PUT", files + "?path=m.txt&mode=rwx", "x", tok(sb), 400, apitype.CodeBadRequest},
		{"put mode too big", "PUT", files + "?path=m.txt&mode=10000", "x", tok(sb), 400, apitype.CodeBadRequest},
		{"put mode negative", "PUT", files + "?path=m.txt&mode=-1", "x", tok(sb), 400, apitype.CodeBadRequest},
		{"get a directory", "GET", files + "?path=.", "", tok(sb), 400, apitype.CodeBadRequest},
		{"list depth zero", "GET", "/v1/sandboxes/" + sb.ID + "/list?depth=0", "", tok(sb), 400, apitype.CodeBadRequest},
		{"list depth not a number", "GET", "/v1/sandboxes/" + sb.ID + "/list?depth=x", "", tok(sb), 400, apitype.CodeBadRequest},
		{"wait negative timeout", "POST", "/v1/sandboxes/" + sb.ID + "/wait", `{"path":"f.txt","text":"x","timeout_secs":-1}`, tok(sb), 400, apitype.CodeBadRequest},
		{"snapshot bad tag", "POST", "/v1/snapshots", `{"tag":"../x","warm":"true"}`, nil, 400, apitype.CodeBadRequest},
		{"snapshot no body", "POST", "/v1/snapshots", "", nil, 400, apitype.CodeBadRequest},
		{"snapshot negative pool", "POST", "/v1/snapshots", `{"tag":"p","warm":"true","pool_size":-1}`, nil, 400, apitype.CodeBadRequest},
		{"snapshot of a sandbox with n", "POST", "/v1/sandboxes/" + sb.ID + "/snapshot", `{"n":1}`, tok(sb), 400, apitype.CodeBadRequest},
		{"branch ttl negative", "POST", "/v1/sandboxes/" + sb.ID + "/branch", `{"ttl_secs":-1}`, tok(sb), 400, apitype.CodeBadRequest},

		// 409, 429
		{"duplicate snapshot tag", "POST", "/v1/snapshots", `{"tag":"dup","warm":"true"}`, nil, 409, apitype.CodeConflict},
		{"duplicate branch tag", "POST", "/v1/sandboxes/" + sb.ID + "/branch", `{"tag":"dup"}`, tok(sb), 409, apitype.CodeConflict},
		{"over the sandbox limit", "POST", "/v1/sandboxes", `{"n":9}`, nil, 429, apitype.CodeLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := s.doString(t, tc.method, tc.path, tc.body, tc.h)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.wantStatus, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var eb apitype.ErrorBody
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&eb); err != nil {
				t.Fatalf("error body %q: %v", b, err)
			}
			if eb.Code != tc.wantCode || eb.Error == "" {
				t.Errorf("error body %+v, want code %q and a message", eb, tc.wantCode)
			}
		})
	}
	// Nothing refused above changed anything.
	if n := s.svc.Count(); n != 2 {
		t.Errorf("%d sandboxes live, want 2", n)
	}
	if n := len(s.svc.Snapshots(context.Background())); n != 2 {
		t.Errorf("%d snapshots, want 2", n)
	}
}

// TestErrorWording: the service's errors name no route or header; the API
// adds them, only where they help.
func TestErrorWording(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/snapshot", `{"tag":"mine"}`, tok(sb), http.StatusCreated, nil)
	const unknown = "sb-000000000000"
	tests := []struct {
		name, method, path, body string
		h                        hdr
		want                     string
	}{
		{"no sandbox token", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"shell":"true"}`, nil,
			"forbidden: sandbox " + sb.ID + " needs its token in the X-Sandbox-Token header (it was returned when the sandbox was created)"},
		{"wrong sandbox token", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"shell":"true"}`, hdr{apitype.SandboxTokenHeader: "nope"},
			"forbidden: wrong token for sandbox " + sb.ID},
		{"unknown sandbox", "GET", "/v1/sandboxes/" + unknown, "", nil,
			`sandbox "` + unknown + `": not found (it may have expired or been killed; list sandboxes with GET /v1/sandboxes)`},
		{"delete unknown sandbox", "DELETE", "/v1/sandboxes/" + unknown, "", nil, `sandbox "` + unknown + `": not found`},
		{"unknown snapshot", "GET", "/v1/snapshots/nope", "", nil, `snapshot "nope": not found (list snapshots with GET /v1/snapshots)`},
		{"spawn unknown snapshot", "POST", "/v1/sandboxes", `{"snapshot_tag":"nope"}`, nil,
			`snapshot "nope": not found (list snapshots with GET /v1/snapshots)`},
		{"delete unknown snapshot", "DELETE", "/v1/snapshots/nope", "", nil, `snapshot "nope": not found`},
		{"ttl over max", "POST", "/v1/sandboxes", `{"ttl_secs":3601}`, nil, "invalid request: ttl_secs 3601 exceeds the maximum of 3600"},
		{"extend ttl zero", "POST", "/v1/sandboxes/" + sb.ID + "/extend", `{"ttl_secs":0}`, nil, "invalid request: ttl_secs must be positive"},
		{"branch ttl over max", "POST", "/v1/sandboxes/" + sb.ID + "/branch", `{"ttl_secs":3601}`, tok(sb),
			"invalid request: ttl_secs must be between 0 and 3600"},
		{"branch without the sandbox token", "POST", "/v1/sandboxes/" + sb.ID + "/branch", `{}`, nil,
			"forbidden: sandbox " + sb.ID + " needs its token in the X-Sandbox-Token header (it was returned when the sandbox was created)"},
		{"spawn from a sandbox's snapshot without its token", "POST", "/v1/sandboxes", `{"snapshot_tag":"mine"}`, nil,
			`forbidden: snapshot "mine" was saved from sandbox ` + sb.ID + `, so spawning from it needs that sandbox's token in the X-Sandbox-Token header (it was returned when the sandbox was created)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, b := s.doString(t, tc.method, tc.path, tc.body, tc.h)
			var eb apitype.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error != tc.want {
				t.Errorf("error %q (%v), want %q", eb.Error, err, tc.want)
			}
		})
	}
}

func TestHealthzNeedsNoKey(t *testing.T) {
	s := newServer(t)
	var out map[string]bool
	s.call(t, "GET", "/healthz", "", hdr{"Authorization": ""}, http.StatusOK, &out)
	if !out["ok"] {
		t.Errorf("healthz = %v", out)
	}
}

func TestVersionAndInfo(t *testing.T) {
	s := newServer(t)
	var v apitype.VersionResponse
	s.call(t, "GET", "/version", "", nil, http.StatusOK, &v)
	if v.Version != "v-test" {
		t.Errorf("version = %+v", v)
	}
	var info apitype.Info
	s.call(t, "GET", "/v1/info", "", nil, http.StatusOK, &info)
	if info.Backend != "fake" {
		t.Errorf("info = %+v", info)
	}
}

func TestSandboxLifecycle(t *testing.T) {
	s := newServer(t)
	var created []apitype.SandboxInfo
	t0 := time.Now().Unix()
	s.call(t, "POST", "/v1/sandboxes", `{"n":2,"ttl_secs":60,"cpus":2,"memory_mib":128,"disk_mib":512,"pids":100}`, nil, http.StatusCreated, &created)
	if len(created) != 2 {
		t.Fatalf("created %d sandboxes, want 2", len(created))
	}
	for _, c := range created {
		if c.ID == "" || c.Token == "" || c.Status != apitype.StatusRunning || c.Backend != "fake" || c.Image != "default-0001" ||
			c.CPUs != 2 || c.MemoryMiB != 128 || c.DiskMiB != 512 || c.Pids != 100 || c.ExpiresAtUnix-c.CreatedAtUnix != 60 || c.CreatedAtUnix < t0 {
			t.Errorf("created %+v", c)
		}
	}
	sb := created[0]

	// Listing and getting never show tokens.
	b := s.call(t, "GET", "/v1/sandboxes", "", nil, http.StatusOK, nil)
	var list []apitype.SandboxInfo
	if err := json.Unmarshal(b, &list); err != nil || len(list) != 2 {
		t.Fatalf("list = %s, %v", b, err)
	}
	b = s.call(t, "GET", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusOK, nil)
	for _, c := range created {
		if bytes.Contains(b, []byte(c.Token)) {
			t.Errorf("GET shows a token: %s", b)
		}
	}
	var got apitype.SandboxInfo
	json.Unmarshal(b, &got)
	if got.ID != sb.ID || got.Token != "" {
		t.Errorf("get = %+v", got)
	}

	// Extend.
	var ext apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/extend", `{"ttl_secs":600}`, nil, http.StatusOK, &ext)
	if now := time.Now().Unix(); ext.ExpiresAtUnix < now+599 || ext.ExpiresAtUnix > now+601 {
		t.Errorf("extended to %d, want about %d", ext.ExpiresAtUnix, now+600)
	}

	// Data plane.
	var ping apitype.PingResponse
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/ping", "", tok(sb), http.StatusOK, &ping)
	if !ping.OK || ping.Hostname != sb.ID {
		t.Errorf("ping = %+v", ping)
	}
	res := s.exec(t, sb, `{"args":["sh","-c","echo $FOO; cat; exit 4"],"env":{"FOO":"bar"},"stdin":"in"}`)
	if res.Stdout != "bar\nin" || res.ExitCode != 4 {
		t.Errorf("exec = %+v", res)
	}
	// forkd's header name works too.
	var alt apitype.ExecResponse
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"shell":"echo alt"}`,
		hdr{apitype.SandboxTokenHeaderAlt: sb.Token}, http.StatusOK, &alt)
	if alt.Stdout != "alt\n" {
		t.Errorf("exec with the alternative header = %+v", alt)
	}
	s.call(t, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=d/x.txt", "waiting for this", tok(sb), http.StatusOK, nil)
	var ls apitype.ListFilesResponse
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/list?path=d&depth=2", "", tok(sb), http.StatusOK, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Size != 16 || ls.Entries[0].Mode != "0644" {
		t.Errorf("list = %+v", ls)
	}
	var w apitype.WaitResponse
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/wait", `{"path":"d/x.txt","text":"for","timeout_secs":1}`, tok(sb), http.StatusOK, &w)
	if !w.Found {
		t.Errorf("wait = %+v", w)
	}

	// Metrics.
	mb := s.call(t, "GET", "/metrics", "", nil, http.StatusOK, nil)
	for _, line := range []string{`cove_sandboxes{state="running",tenant="default"} 2` + "\n", "cove_sandboxes_created_total 2\n", "cove_execs_total 2\n", "# TYPE cove_sandboxes gauge\n"} {
		if !bytes.Contains(mb, []byte(line)) {
			t.Errorf("metrics lack %q:\n%s", line, mb)
		}
	}

	// Delete.
	if b := s.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusNoContent, nil); len(b) != 0 {
		t.Errorf("204 with a body: %q", b)
	}
	s.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusNotFound, nil)
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"shell":"true"}`, tok(sb), http.StatusNotFound, nil)
	if ids := s.rt.IDs(); len(ids) != 1 || ids[0] != created[1].ID {
		t.Errorf("runtime holds %v, want [%s]", ids, created[1].ID)
	}
	mb = s.call(t, "GET", "/metrics", "", nil, http.StatusOK, nil)
	if !bytes.Contains(mb, []byte(`cove_sandboxes{state="running",tenant="default"} 1`+"\n")) {
		t.Errorf("metrics after delete:\n%s", mb)
	}
}

// TestCompat drives sandboxd's four calls.
func TestCompat(t *testing.T) {
	s := newServer(t)
	var c apitype.CompatCreateResponse
	b := s.call(t, "POST", "/sandboxes", "", nil, http.StatusCreated, &c)
	if c.ID == "" || c.Token == "" {
		t.Fatalf("create = %s", b)
	}
	sb := apitype.SandboxInfo{ID: c.ID, Token: c.Token}
	var fi apitype.FileInfo
	s.call(t, "PUT", "/sandboxes/"+c.ID+"/files/a.txt", "hello from compat", tok(sb), http.StatusOK, &fi)
	if fi.Size != 17 || fi.Type != "file" {
		t.Errorf("put = %+v", fi)
	}
	s.call(t, "PUT", "/sandboxes/"+c.ID+"/files/sub/dir/b.txt", "nested", tok(sb), http.StatusOK, nil)
	var res apitype.ExecResponse
	s.call(t, "POST", "/sandboxes/"+c.ID+"/exec", `{"cmd":["cat","a.txt","sub/dir/b.txt"]}`, tok(sb), http.StatusOK, &res)
	if res.Stdout != "hello from compat"+"nested" || res.ExitCode != 0 {
		t.Errorf("exec = %+v", res)
	}
	s.call(t, "DELETE", "/sandboxes/"+c.ID, "", nil, http.StatusNoContent, nil)
	s.call(t, "DELETE", "/sandboxes/"+c.ID, "", nil, http.StatusNotFound, nil)
	if ids := s.rt.IDs(); len(ids) != 0 {
		t.Errorf("runtime holds %v", ids)
	}
}

func TestFileRoundTrip(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	for _, size := range []int{0, 1, 3<<20 + 12345} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			data := make([]byte, size)
			rand.Read(data)
			path := fmt.Sprintf("/v1/sandboxes/%s/files?path=data/blob-%d.bin&mode=0600", sb.ID, size)
			resp, b := s.do(t, "PUT", path, bytes.NewReader(data), tok(sb))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("put: %d %s", resp.StatusCode, b)
			}
			var fi apitype.FileInfo
			if err := json.Unmarshal(b, &fi); err != nil || fi.Size != int64(size) || fi.Mode != "0600" || fi.Type != "file" {
				t.Fatalf("put = %s, %v", b, err)
			}
			resp, got := s.do(t, "GET", fmt.Sprintf("/v1/sandboxes/%s/files?path=data/blob-%d.bin", sb.ID, size), nil, tok(sb))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("get: %d %s", resp.StatusCode, got)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("downloaded %d bytes, not the %d uploaded", len(got), len(data))
			}
			if fs := resp.Header.Get("X-File-Size"); fs != strconv.Itoa(size) {
				t.Errorf("X-File-Size %q, want %d", fs, size)
			}
			if m := resp.Header.Get("X-File-Mode"); m != "0600" {
				t.Errorf("X-File-Mode %q", m)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/octet-stream" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestSnapshots(t *testing.T) {
	s := newServer(t)
	var sn apitype.SnapshotInfo
	s.call(t, "POST", "/v1/snapshots", `{"tag":"base","warm":"true","cpus":2,"memory_mib":128,"pool_size":0}`, nil, http.StatusCreated, &sn)
	if sn.Tag != "base" || sn.Depth != 0 || sn.CPUs != 2 || sn.MemoryMiB != 128 || sn.Backend != "fake" || sn.SizeBytes == 0 {
		t.Errorf("snapshot = %+v", sn)
	}
	s.call(t, "POST", "/v1/snapshots", `{"tag":"base","warm":"true"}`, nil, http.StatusConflict, nil)

	var kids []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{"snapshot_tag":"base"}`, nil, http.StatusCreated, &kids)
	if len(kids) != 1 || kids[0].SnapshotTag != "base" || kids[0].CPUs != 2 {
		t.Fatalf("spawn = %+v", kids)
	}
	s.call(t, "POST", "/v1/sandboxes", `{"snapshot_tag":"base","cpus":1}`, nil, http.StatusBadRequest, nil)

	var br apitype.BranchResponse
	s.call(t, "POST", "/v1/sandboxes/"+kids[0].ID+"/branch", `{"tag":"br","n":2,"ttl_secs":60}`, tok(kids[0]), http.StatusCreated, &br)
	if br.Tag != "br" || br.Depth != 1 || br.Parent != "base" || br.BranchedFrom != kids[0].ID || len(br.Children) != 2 || br.PauseMs < 0 {
		t.Errorf("branch = %+v", br)
	}
	for _, c := range br.Children {
		if c.Token == "" || c.SnapshotTag != "br" {
			t.Errorf("child = %+v", c)
		}
	}
	var snapOnly apitype.BranchResponse
	s.call(t, "POST", "/v1/sandboxes/"+br.Children[0].ID+"/snapshot", `{"tag":"leaf"}`, tok(br.Children[0]), http.StatusCreated, &snapOnly)
	if snapOnly.Depth != 2 || snapOnly.Parent != "br" || len(snapOnly.Children) != 0 {
		t.Errorf("snapshot of a child = %+v", snapOnly)
	}

	var list []apitype.SnapshotInfo
	s.call(t, "GET", "/v1/snapshots", "", nil, http.StatusOK, &list)
	if len(list) != 3 {
		t.Errorf("list = %+v", list)
	}
	var got apitype.SnapshotInfo
	s.call(t, "GET", "/v1/snapshots/br", "", nil, http.StatusOK, &got)
	if got.Children != 2 {
		t.Errorf("get = %+v", got)
	}
	// Spawning from a branch takes its source's token, in either header.
	s.call(t, "POST", "/v1/sandboxes", `{"snapshot_tag":"br"}`, nil, http.StatusForbidden, nil)
	s.call(t, "POST", "/v1/sandboxes", `{"snapshot_tag":"br"}`, hdr{apitype.SandboxTokenHeaderAlt: kids[0].Token}, http.StatusCreated, nil)

	// A snapshot with live children stays.
	s.call(t, "DELETE", "/v1/snapshots/base", "", nil, http.StatusConflict, nil)
	s.call(t, "DELETE", "/v1/sandboxes/"+kids[0].ID, "", nil, http.StatusNoContent, nil)
	s.call(t, "DELETE", "/v1/snapshots/base", "", nil, http.StatusNoContent, nil)
	s.call(t, "DELETE", "/v1/snapshots/base", "", nil, http.StatusNotFound, nil)
}
