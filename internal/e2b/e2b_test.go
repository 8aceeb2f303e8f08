package e2b_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/api"
	"github.com/cove-sandbox/cove/internal/e2b"
	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const daemonKey = "daemon-key"

// fakeNetwork accepts every policy and remembers the last one per sandbox.
type fakeNetwork struct {
	mu sync.Mutex
	p  map[string]netpolicy.Policy
}

func (f *fakeNetwork) Validate(netpolicy.Policy) error { return nil }
func (f *fakeNetwork) Attach(_ context.Context, id, _ string, p netpolicy.Policy) error {
	return f.Update(id, p)
}
func (f *fakeNetwork) Update(id string, p netpolicy.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.p[id] = p
	return nil
}
func (f *fakeNetwork) Detach(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.p, id)
}

type env struct {
	url  string // the facade's
	keys *keys.Manager
	net  *fakeNetwork
	// daemon is cove's own API, with the daemon's key.
	daemon *client.Client
}

// newEnv is the facade over a real API server over the fake runtime, as
// serve wires them: the facade reaches the daemon only through its API.
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	km, err := keys.New(ctx, keys.Config{Store: st, Bootstrap: daemonKey})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	fnet := &fakeNetwork{p: map[string]netpolicy.Policy{}}
	seal := make([]byte, 32)
	svc := sandbox.New(sandbox.Config{
		Runtime: runtimetest.New(t), Store: st, Images: runtimetest.NewImages(map[string]string{"default": "default-0001"}),
		DefaultImage: "default", Logger: log, StartTimeout: 5 * time.Second, SnapshotDir: filepath.Join(t.TempDir(), "snapshots"),
		Network: fnet, TokenSealKey: seal,
		Limits: sandbox.Limits{DefaultTTL: 10 * time.Minute, MaxTTL: time.Hour, DefaultCPUs: 1, MaxCPUs: 4,
			DefaultMemoryMiB: 256, MaxMemoryMiB: 2048, MaxSandboxes: 20, DefaultDiskMiB: 1024, MaxDiskMiB: 4096,
			DefaultPids: 256, MaxPids: 1024},
	})
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	daemon := httptest.NewServer(api.New(api.Config{Service: svc, APIKey: daemonKey, Keys: km, Version: "v-test", Logger: log,
		Info: func(context.Context) apitype.Info { return apitype.Info{} }}))
	t.Cleanup(daemon.Close)
	facade := httptest.NewServer(e2b.New(e2b.Config{API: client.New(daemon.URL, daemonKey), EnvdVersion: "0.5.7",
		Domain: "localhost:8443", Logger: log, User: "nobody", Cwd: "/tmp"}))
	t.Cleanup(facade.Close)
	return &env{url: facade.URL, keys: km, net: fnet, daemon: client.New(daemon.URL, daemonKey)}
}

func (e *env) key(t *testing.T, o keys.CreateOptions) string {
	t.Helper()
	_, secret, err := e.keys.Create(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return keys.E2BPrefix + secret
}

// call sends a request to the facade with key and returns status, header
// and body.
func (e *env) call(t *testing.T, key, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (e *env) must(t *testing.T, key, method, path, body string, want int, out any) http.Header {
	t.Helper()
	st, h, b := e.call(t, key, method, path, body)
	if st != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, st, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return h
}

type sandboxResp struct {
	SandboxID, TemplateID, ClientID, EnvdVersion, EnvdAccessToken string
	Domain                                                        *string
}

type detailResp struct {
	SandboxID, TemplateID, State, EnvdAccessToken string
	Metadata                                      map[string]string
	StartedAt, EndAt                              time.Time
}

type errResp struct {
	Code    int
	Message string
}

// TestCreateConnect: both generations' create and connect answer what
// the SDK reads, with the sandbox's own token, which the daemon gives
// again to a key allowed to see tokens.
func TestCreateConnect(t *testing.T) {
	e := newEnv(t)
	k := e.key(t, keys.CreateOptions{Name: "a", Tenant: "acme"})
	for _, gen := range []string{"", "/v2"} {
		t.Run("gen"+gen, func(t *testing.T) {
			var sb sandboxResp
			e.must(t, k, "POST", gen+"/sandboxes", `{"templateID":"base","timeout":300,"metadata":{"app":"x"},"envVars":{"A":"1"},"mcp":null}`, http.StatusCreated, &sb)
			if sb.SandboxID == "" || sb.TemplateID != "base" || sb.ClientID == "" || sb.EnvdVersion != "0.5.7" || sb.EnvdAccessToken == "" {
				t.Fatalf("create: %+v", sb)
			}
			if sb.Domain == nil || *sb.Domain != "localhost:8443" {
				t.Fatalf("domain %v", sb.Domain)
			}
			// What cove keeps: the user and cwd the facade is configured
			// with, the env, the metadata as labels.
			info, err := e.daemon.GetSandbox(context.Background(), sb.SandboxID)
			if err != nil {
				t.Fatal(err)
			}
			if info.User != "nobody" || info.Cwd != "/tmp" || info.Env["A"] != "1" || info.Labels["e2b.meta.app"] != "x" || info.Labels["e2b.template"] != "base" ||
				info.Labels[apitype.LabelPublicPorts] != "true" {
				t.Fatalf("cove's record: %+v", info)
			}
			var c sandboxResp
			e.must(t, k, "POST", gen+"/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":600}`, http.StatusOK, &c)
			if c.SandboxID != sb.SandboxID || c.EnvdAccessToken != sb.EnvdAccessToken {
				t.Fatalf("connect: %+v, want the created sandbox's token %q", c, sb.EnvdAccessToken)
			}
			var d detailResp
			e.must(t, k, "GET", "/sandboxes/"+sb.SandboxID, "", http.StatusOK, &d)
			if d.State != "running" || d.Metadata["app"] != "x" || d.EnvdAccessToken != sb.EnvdAccessToken || time.Until(d.EndAt) < 500*time.Second {
				t.Fatalf("get after connect{timeout:600}: %+v", d)
			}
		})
	}
}

// TestErrors: E2B's {code, message} with the status the SDK maps to its
// errors: 401 AuthenticationError, 404 NotFoundError.
func TestErrors(t *testing.T) {
	e := newEnv(t)
	k := e.key(t, keys.CreateOptions{Name: "a", Tenant: "acme"})
	tests := []struct {
		name, key, method, path, body string
		want                          int
	}{
		{"no key", "", "GET", "/v2/sandboxes", "", 401},
		{"wrong key", "e2b_0123456789abcdef", "GET", "/v2/sandboxes", "", 401},
		{"wrong key on create", "e2b_00", "POST", "/v2/sandboxes", `{"templateID":"base"}`, 401},
		{"unknown sandbox get", k, "GET", "/sandboxes/sb-000000000000", "", 404},
		{"unknown sandbox kill", k, "DELETE", "/sandboxes/sb-000000000000", "", 404},
		{"unknown sandbox connect", k, "POST", "/v2/sandboxes/sb-000000000000/connect", `{}`, 404},
		{"unknown sandbox timeout", k, "POST", "/sandboxes/sb-000000000000/timeout", `{"timeout":5}`, 404},
		{"unknown template", k, "POST", "/v2/sandboxes", `{"templateID":"nope"}`, 404},
		{"bad timeout", k, "POST", "/sandboxes/sb-000000000000/timeout", `{"timeout":0}`, 400},
		{"bad body", k, "POST", "/v2/sandboxes", `{"templateID":`, 400},
		{"bad limit", k, "GET", "/v2/sandboxes?limit=x", "", 400},
		{"unserved route", k, "GET", "/v3/templates", "", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, b := e.call(t, tt.key, tt.method, tt.path, tt.body)
			var er errResp
			if err := json.Unmarshal(b, &er); err != nil {
				t.Fatalf("body %q: %v", b, err)
			}
			if st != tt.want || er.Code != tt.want || er.Message == "" {
				t.Fatalf("%d %s, want %d with code %d", st, b, tt.want, tt.want)
			}
		})
	}
}

// TestListTenancy: list filters by metadata and state, pages with
// X-Next-Token, and shows a tenant only its own sandboxes.
func TestListTenancy(t *testing.T) {
	e := newEnv(t)
	acme := e.key(t, keys.CreateOptions{Name: "a", Tenant: "acme"})
	beta := e.key(t, keys.CreateOptions{Name: "b", Tenant: "beta"})
	var ids []string
	for _, md := range []string{`{"team":"red"}`, `{"team":"red","x":"1"}`, `{"team":"blue","Owner Name":"Zoë"}`} {
		var sb sandboxResp
		e.must(t, acme, "POST", "/v2/sandboxes", `{"templateID":"base","metadata":`+md+`}`, http.StatusCreated, &sb)
		ids = append(ids, sb.SandboxID)
	}
	var other sandboxResp
	e.must(t, beta, "POST", "/v2/sandboxes", `{"metadata":{"team":"red"}}`, http.StatusCreated, &other)

	list := func(key, q string) ([]detailResp, string) {
		var out []detailResp
		h := e.must(t, key, "GET", "/v2/sandboxes"+q, "", http.StatusOK, &out)
		return out, h.Get("X-Next-Token")
	}
	tests := []struct {
		name, key, q string
		want         int
	}{
		{"all of acme", acme, "", 3},
		{"metadata team=red", acme, "?metadata=team%3Dred", 2},
		{"metadata two keys", acme, "?metadata=team%3Dred%26x%3D1", 1},
		{"metadata key cove labels cannot hold", acme, "?metadata=Owner%2BName%3DZo%C3%AB", 1},
		{"state paused", acme, "?state=paused", 0},
		{"state running", acme, "?state=running", 3},
		{"beta sees its own", beta, "", 1},
		{"beta with acme's filter", beta, "?metadata=team%3Dblue", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := list(tt.key, tt.q)
			if len(got) != tt.want {
				t.Fatalf("%d sandboxes, want %d: %+v", len(got), tt.want, got)
			}
			for _, d := range got {
				if tt.key == beta && d.SandboxID != other.SandboxID {
					t.Fatalf("beta sees %s", d.SandboxID)
				}
			}
		})
	}
	// Paging: 2 then 1, no token after the last page.
	p1, next := list(acme, "?limit=2")
	if len(p1) != 2 || next == "" {
		t.Fatalf("page 1: %d, next %q", len(p1), next)
	}
	p2, next2 := list(acme, "?limit=2&nextToken="+next)
	if len(p2) != 1 || next2 != "" || p2[0].SandboxID == p1[0].SandboxID || p2[0].SandboxID == p1[1].SandboxID {
		t.Fatalf("page 2: %+v, next %q", p2, next2)
	}
	// Another tenant's sandbox is not found by any route.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/" + ids[0], ""}, {"DELETE", "/sandboxes/" + ids[0], ""},
		{"POST", "/v2/sandboxes/" + ids[0] + "/connect", `{}`}, {"POST", "/sandboxes/" + ids[0] + "/pause", ""},
		{"POST", "/sandboxes/" + ids[0] + "/timeout", `{"timeout":9}`}, {"POST", "/sandboxes/" + ids[0] + "/fork", `{"count":1}`},
	} {
		if st, _, b := e.call(t, beta, r.method, r.path, r.body); st != 404 {
			t.Errorf("beta %s %s: %d %s, want 404", r.method, r.path, st, b)
		}
	}
}

// TestRevealTokens: a key with reveal_tokens off creates (its create
// answer has the token, as cove's own does) but may not connect, and its
// get carries no token.
func TestRevealTokens(t *testing.T) {
	e := newEnv(t)
	k := e.key(t, keys.CreateOptions{Name: "h", Tenant: "acme", HideTokens: true})
	var sb sandboxResp
	e.must(t, k, "POST", "/v2/sandboxes", `{}`, http.StatusCreated, &sb)
	if sb.EnvdAccessToken == "" {
		t.Fatal("create answered no token")
	}
	var er errResp
	e.must(t, k, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{}`, http.StatusForbidden, &er)
	if er.Code != 403 {
		t.Fatalf("connect: %+v", er)
	}
	var d detailResp
	e.must(t, k, "GET", "/sandboxes/"+sb.SandboxID, "", http.StatusOK, &d)
	if d.EnvdAccessToken != "" {
		t.Fatal("get revealed the token")
	}
	// An admin of another tenant manages it but is not given its token.
	admin := e.key(t, keys.CreateOptions{Name: "adm", Tenant: "ops", Admin: true})
	e.must(t, admin, "GET", "/sandboxes/"+sb.SandboxID, "", http.StatusOK, &d)
	if d.EnvdAccessToken != "" {
		t.Fatal("another tenant's admin got the token")
	}
	e.must(t, admin, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{}`, http.StatusForbidden, nil)
}

// TestLifecycle: timeout, pause (409 the second time), connect resumes
// with the same token, fork makes children, snapshots, metrics, network,
// kill.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	k := e.key(t, keys.CreateOptions{Name: "a", Tenant: "acme"})
	var sb sandboxResp
	e.must(t, k, "POST", "/v2/sandboxes", `{"timeout":60,"metadata":{"m":"1"}}`, http.StatusCreated, &sb)
	id := sb.SandboxID

	e.must(t, k, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":1200}`, http.StatusNoContent, nil)
	var d detailResp
	e.must(t, k, "GET", "/sandboxes/"+id, "", http.StatusOK, &d)
	if left := time.Until(d.EndAt); left < 1100*time.Second || left > 1300*time.Second {
		t.Fatalf("after timeout 1200: ends in %v", left)
	}

	var ms []struct {
		CPUCount int
		MemTotal int64
	}
	e.must(t, k, "GET", "/sandboxes/"+id+"/metrics", "", http.StatusOK, &ms)
	if len(ms) != 1 || ms[0].CPUCount != 1 {
		t.Fatalf("metrics %+v", ms)
	}

	e.must(t, k, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":["10.1.0.0/16","example.com"],"denyOut":["1.2.3.4"]}`, http.StatusNoContent, nil)
	e.net.mu.Lock()
	p := e.net.p[id]
	e.net.mu.Unlock()
	if len(p.AllowCIDRs) != 1 || len(p.AllowDomains) != 1 || p.AllowDomains[0] != "example.com" || len(p.DenyCIDRs) != 1 {
		t.Fatalf("policy %+v", p)
	}

	var forks []struct {
		Sandbox *sandboxResp
		Error   *errResp
	}
	e.must(t, k, "POST", "/sandboxes/"+id+"/fork", `{"count":2,"timeout":120}`, http.StatusOK, &forks)
	if len(forks) != 2 || forks[0].Sandbox == nil || forks[0].Sandbox.SandboxID == id || forks[0].Sandbox.EnvdAccessToken == "" {
		t.Fatalf("fork: %+v", forks)
	}
	var child detailResp
	e.must(t, k, "GET", "/sandboxes/"+forks[1].Sandbox.SandboxID, "", http.StatusOK, &child)
	if child.Metadata["m"] != "1" {
		t.Fatalf("fork child metadata %+v", child.Metadata)
	}

	var snap struct {
		SnapshotID string
		Names      []string
	}
	e.must(t, k, "POST", "/sandboxes/"+id+"/snapshots", `{"name":"mysnap"}`, http.StatusCreated, &snap)
	if snap.SnapshotID != "mysnap" {
		t.Fatalf("snapshot %+v", snap)
	}
	var snaps []struct{ SnapshotID string }
	e.must(t, k, "GET", "/snapshots?sandboxID="+id, "", http.StatusOK, &snaps)
	if len(snaps) < 1 {
		t.Fatalf("snapshots of %s: %+v", id, snaps)
	}

	e.must(t, k, "POST", "/sandboxes/"+id+"/pause", `{}`, http.StatusNoContent, nil)
	e.must(t, k, "POST", "/sandboxes/"+id+"/pause", `{}`, http.StatusConflict, nil)
	var paused []detailResp
	e.must(t, k, "GET", "/v2/sandboxes?state=paused", "", http.StatusOK, &paused)
	if len(paused) != 1 || paused[0].SandboxID != id || paused[0].State != "paused" {
		t.Fatalf("paused list %+v", paused)
	}
	var c sandboxResp
	e.must(t, k, "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":300}`, http.StatusCreated, &c)
	if c.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatal("resumed sandbox's token changed")
	}
	e.must(t, k, "GET", "/sandboxes/"+id, "", http.StatusOK, &d)
	if d.State != "running" {
		t.Fatalf("after connect: %+v", d)
	}

	e.must(t, k, "DELETE", "/sandboxes/"+id, "", http.StatusNoContent, nil)
	e.must(t, k, "GET", "/sandboxes/"+id, "", http.StatusNotFound, nil)
	e.must(t, k, "DELETE", "/sandboxes/"+id, "", http.StatusNotFound, nil)
}
