package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fakeNetwork is the service's Network: it checks a policy as netpolicy
// would (CIDRs that parse, presets it knows) and records what is attached.
type fakeNetwork struct {
	mu       sync.Mutex
	attached map[string]netpolicy.Policy
}

func newFakeNetwork() *fakeNetwork { return &fakeNetwork{attached: map[string]netpolicy.Policy{}} }

func (f *fakeNetwork) Validate(p netpolicy.Policy) error {
	for _, c := range slices.Concat(p.AllowCIDRs, p.DenyCIDRs) {
		if _, err := netip.ParsePrefix(c); err != nil {
			if _, err := netip.ParseAddr(c); err != nil {
				return fmt.Errorf("%w: %q is not a CIDR", netpolicy.ErrInvalid, c)
			}
		}
	}
	for _, pr := range p.Presets {
		if pr != "pypi" {
			return fmt.Errorf("%w: no preset %q", netpolicy.ErrInvalid, pr)
		}
	}
	return nil
}

func (f *fakeNetwork) Attach(ctx context.Context, id, ns string, p netpolicy.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached[id] = p
	return nil
}

func (f *fakeNetwork) Update(id string, p netpolicy.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached[id] = p
	return nil
}

func (f *fakeNetwork) Detach(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.attached, id)
}

func (f *fakeNetwork) policy(id string) (netpolicy.Policy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.attached[id]
	return p, ok
}

// withPreview serves previews through internal/preview over the service.
func withPreview(t *testing.T) func(*Config) {
	return func(c *Config) {
		c.Preview = preview.New(preview.Config{Backend: PreviewBackend(c.Service)})
	}
}

// TestNetworkErrors: bad input to the network and port routes is refused
// with a clear status, and changes nothing.
func TestNetworkErrors(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	other := s.create(t)
	const unknown = "sb-000000000000"
	base := "/v1/sandboxes/" + sb.ID
	upgrade := hdr{apitype.SandboxTokenHeader: sb.Token, "Connection": "Upgrade", "Upgrade": "cove-tcp"}
	tests := []struct {
		name, method, path, body string
		h                        hdr
		wantStatus               int
	}{
		{"network without the API key", "PUT", base + "/network", `{}`, hdr{"Authorization": ""}, 401},
		{"network of an unknown sandbox", "PUT", "/v1/sandboxes/" + unknown + "/network", `{}`, nil, 404},
		{"network: no body", "PUT", base + "/network", "", nil, 400},
		{"network: malformed", "PUT", base + "/network", `{"allow_cidrs":[`, nil, 400},
		{"network: unknown field", "PUT", base + "/network", `{"allow":["10.0.0.0/8"]}`, nil, 400},
		{"network: a string for a list", "PUT", base + "/network", `{"allow_domains":"pypi.org"}`, nil, 400},
		{"network: not an object", "PUT", base + "/network", `["pypi.org"]`, nil, 400},
		{"network: data after it", "PUT", base + "/network", `{} {}`, nil, 400},

		{"expose without the sandbox token", "POST", base + "/ports", `{"port":8000}`, nil, 403},
		{"expose with another's token", "POST", base + "/ports", `{"port":8000}`, tok(other), 403},
		{"expose in an unknown sandbox", "POST", "/v1/sandboxes/" + unknown + "/ports", `{"port":8000}`, tok(sb), 404},
		{"expose port 0", "POST", base + "/ports", `{"port":0}`, tok(sb), 400},
		{"expose port -1", "POST", base + "/ports", `{"port":-1}`, tok(sb), 400},
		{"expose port 70000", "POST", base + "/ports", `{"port":70000}`, tok(sb), 400},
		{"expose port abc", "POST", base + "/ports", `{"port":"abc"}`, tok(sb), 400},
		{"expose port 80.5", "POST", base + "/ports", `{"port":80.5}`, tok(sb), 400},
		{"expose no port", "POST", base + "/ports", `{}`, tok(sb), 400},
		{"expose no body", "POST", base + "/ports", "", tok(sb), 400},
		{"expose public not a bool", "POST", base + "/ports", `{"port":8000,"public":"yes"}`, tok(sb), 400},
		{"expose unknown field", "POST", base + "/ports", `{"port":8000,"tls":true}`, tok(sb), 400},

		{"ports without the sandbox token", "GET", base + "/ports", "", nil, 403},
		{"ports of an unknown sandbox", "GET", "/v1/sandboxes/" + unknown + "/ports", "", tok(sb), 404},

		{"unexpose without the sandbox token", "DELETE", base + "/ports/8000", "", nil, 403},
		{"unexpose in an unknown sandbox", "DELETE", "/v1/sandboxes/" + unknown + "/ports/8000", "", tok(sb), 404},
		{"unexpose port abc", "DELETE", base + "/ports/abc", "", tok(sb), 400},
		{"unexpose port 0", "DELETE", base + "/ports/0", "", tok(sb), 400},
		{"unexpose port -1", "DELETE", base + "/ports/-1", "", tok(sb), 400},
		{"unexpose port 70000", "DELETE", base + "/ports/70000", "", tok(sb), 400},
		{"unexpose port 1e3", "DELETE", base + "/ports/1e3", "", tok(sb), 400},

		{"connect without the sandbox token", "GET", base + "/ports/8000/connect", "",
			hdr{"Connection": "Upgrade", "Upgrade": "cove-tcp"}, 403},
		{"connect in an unknown sandbox", "GET", "/v1/sandboxes/" + unknown + "/ports/8000/connect", "", upgrade, 404},
		{"connect port abc", "GET", base + "/ports/abc/connect", "", upgrade, 400},
		{"connect port 70000", "GET", base + "/ports/70000/connect", "", upgrade, 400},
		{"connect without an upgrade", "GET", base + "/ports/8000/connect", "", tok(sb), 400},
		{"connect upgrading to another protocol", "GET", base + "/ports/8000/connect", "",
			hdr{apitype.SandboxTokenHeader: sb.Token, "Connection": "Upgrade", "Upgrade": "websocket"}, 400},

		{"create: network a list", "POST", "/v1/sandboxes", `{"network":["pypi.org"]}`, nil, 400},
		{"create: network's unknown field", "POST", "/v1/sandboxes", `{"network":{"allow":["x"]}}`, nil, 400},
		{"create: network's string for a list", "POST", "/v1/sandboxes", `{"network":{"allow_cidrs":"10.0.0.0/8"}}`, nil, 400},
		{"branch: network's unknown field", "POST", base + "/branch", `{"network":{"deny":["x"]}}`, tok(sb), 400},
		{"snapshot build: network's unknown field", "POST", "/v1/snapshots", `{"tag":"n","network":{"presets":"pypi"}}`, nil, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := s.doString(t, tc.method, tc.path, tc.body, tc.h)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.wantStatus, b)
			}
			var eb apitype.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error == "" || eb.Code == "" {
				t.Errorf("error body %q: %v", b, err)
			}
		})
	}
	if n := s.svc.Count(); n != 2 {
		t.Errorf("%d sandboxes live, want 2", n)
	}
	if n := len(s.svc.Snapshots(context.Background())); n != 0 {
		t.Errorf("%d snapshots, want none", n)
	}
	var got apitype.SandboxInfo
	s.call(t, "GET", base, "", nil, http.StatusOK, &got)
	if !got.Network.IsZero() || len(got.Ports) != 0 {
		t.Errorf("after refused calls: network %+v, ports %+v", got.Network, got.Ports)
	}
}

func TestSetNetwork(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	path := "/v1/sandboxes/" + sb.ID + "/network"
	if !sb.Network.IsZero() {
		t.Errorf("a new sandbox's network is %+v, want deny-all", sb.Network)
	}

	var got apitype.SandboxInfo
	s.call(t, "PUT", path, `{"allow_domains":["pypi.org","*.pythonhosted.org"],"allow_cidrs":["192.0.2.0/24"],"presets":["pypi"]}`, nil, http.StatusOK, &got)
	want := apitype.NetworkPolicy{AllowDomains: []string{"pypi.org", "*.pythonhosted.org"}, AllowCIDRs: []string{"192.0.2.0/24"}, Presets: []string{"pypi"}}
	if got.ID != sb.ID || !samePolicy(got.Network, want) || got.Token != "" {
		t.Errorf("PUT network = %+v", got)
	}
	if p, _ := s.net.policy(sb.ID); !samePolicy(apitype.NetworkPolicy(p), want) {
		t.Errorf("the network has %+v, want %+v", p, want)
	}

	// Refused policies change nothing.
	for _, body := range []string{`{"allow_cidrs":["nope"]}`, `{"deny_cidrs":["10.0.0.0/33"]}`, `{"presets":["nope"]}`} {
		resp, b := s.doString(t, "PUT", path, body, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid network policy") {
			t.Errorf("PUT %s: %d %s, want 400 naming the policy", body, resp.StatusCode, b)
		}
	}
	got = apitype.SandboxInfo{}
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusOK, &got)
	if !samePolicy(got.Network, want) {
		t.Errorf("after refused policies: %+v", got.Network)
	}

	// {} closes it again.
	var closed apitype.SandboxInfo
	s.call(t, "PUT", path, `{}`, nil, http.StatusOK, &closed)
	if !closed.Network.IsZero() {
		t.Errorf("PUT {} = %+v", closed.Network)
	}
}

func samePolicy(a, b apitype.NetworkPolicy) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestCreateWithNetwork(t *testing.T) {
	s := newServer(t)
	var out []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{"network":{"allow_domains":["example.org"]}}`, nil, http.StatusCreated, &out)
	want := apitype.NetworkPolicy{AllowDomains: []string{"example.org"}}
	if len(out) != 1 || !samePolicy(out[0].Network, want) {
		t.Fatalf("create = %+v", out)
	}
	resp, b := s.doString(t, "POST", "/v1/sandboxes", `{"n":2,"network":{"allow_cidrs":["not-a-cidr"]}}`, nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("create with a bad policy: %d %s", resp.StatusCode, b)
	}
	if n := s.svc.Count(); n != 1 {
		t.Errorf("%d sandboxes, want 1: a refused create made some", n)
	}

	// A branch takes the source's policy unless it gives one.
	sb := out[0]
	var br apitype.BranchResponse
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/branch", `{"tag":"same","n":1}`, tok(sb), http.StatusCreated, &br)
	if !samePolicy(br.Network, want) || len(br.Children) != 1 || !samePolicy(br.Children[0].Network, want) {
		t.Errorf("branch = %+v", br)
	}
	other := apitype.NetworkPolicy{AllowCIDRs: []string{"198.51.100.0/24"}}
	br = apitype.BranchResponse{} // a field the answer omits would keep the last one's value
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/branch", `{"tag":"other","n":1,"network":{"allow_cidrs":["198.51.100.0/24"]}}`, tok(sb), http.StatusCreated, &br)
	if !samePolicy(br.Network, other) || len(br.Children) != 1 || !samePolicy(br.Children[0].Network, other) {
		t.Errorf("branch with a policy = %+v", br)
	}

	var si apitype.SnapshotInfo
	s.call(t, "POST", "/v1/snapshots", `{"tag":"built","warm":"true","pool_size":0,"network":{"allow_domains":["example.org"]}}`, nil, http.StatusCreated, &si)
	if !samePolicy(si.Network, want) {
		t.Errorf("snapshot built with a policy = %+v", si)
	}
}

func TestPorts(t *testing.T) {
	s := newServer(t, withPreview(t), func(c *Config) { c.PreviewHTTPSPort = 8443 })
	sb := s.create(t)
	ports := "/v1/sandboxes/" + sb.ID + "/ports"

	var p apitype.PortInfo
	s.call(t, "POST", ports, `{"port":8000}`, tok(sb), http.StatusCreated, &p)
	wantURL := s.cfg.Preview.URL("http", s.cfg.PreviewPort, sb.ID, 8000)
	if p.Port != 8000 || p.Public || p.Token == "" || p.URL != wantURL || p.HTTPSURL != s.cfg.Preview.URL("https", 8443, sb.ID, 8000) {
		t.Errorf("expose = %+v, want url %s", p, wantURL)
	}
	var again apitype.PortInfo
	s.call(t, "POST", ports, `{"port":8000}`, tok(sb), http.StatusCreated, &again)
	if again.Token != p.Token {
		t.Errorf("exposing again changed the token: %q, then %q", p.Token, again.Token)
	}
	var pub apitype.PortInfo
	s.call(t, "POST", ports, `{"port":3000,"public":true}`, tok(sb), http.StatusCreated, &pub)
	if !pub.Public || pub.Port != 3000 {
		t.Errorf("expose public = %+v", pub)
	}

	var list apitype.PortsResponse
	s.call(t, "GET", ports, "", tok(sb), http.StatusOK, &list)
	if len(list.Ports) != 2 || !slices.ContainsFunc(list.Ports, func(q apitype.PortInfo) bool { return q.Port == 8000 && q.Token == p.Token }) {
		t.Errorf("ports = %+v", list)
	}
	// The sandbox's description lists them, but not their tokens.
	b := s.call(t, "GET", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusOK, nil)
	var info apitype.SandboxInfo
	json.Unmarshal(b, &info)
	if len(info.Ports) != 2 || bytes.Contains(b, []byte(p.Token)) || info.Ports[0].URL == "" {
		t.Errorf("GET sandbox = %s", b)
	}

	s.call(t, "DELETE", ports+"/8000", "", tok(sb), http.StatusNoContent, nil)
	s.call(t, "DELETE", ports+"/8000", "", tok(sb), http.StatusNotFound, nil)
	s.call(t, "GET", ports, "", tok(sb), http.StatusOK, &list)
	if len(list.Ports) != 1 || list.Ports[0].Port != 3000 {
		t.Errorf("ports after unexpose = %+v", list)
	}
}

func TestPortsWithoutPreview(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	var p apitype.PortInfo
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"port":8000}`, tok(sb), http.StatusCreated, &p)
	if p.Port != 8000 || p.Token == "" || p.URL != "" || p.HTTPSURL != "" {
		t.Errorf("expose with no preview proxy = %+v, want no URL", p)
	}
}

// TestPreviewDispatch: a preview request goes to the preview proxy, which
// takes no API key, before any route.
func TestPreviewDispatch(t *testing.T) {
	s := newServer(t, withPreview(t))
	sb := s.create(t)
	get := func(host string, h hdr) int {
		req, err := http.NewRequest("GET", s.url+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	host := fmt.Sprintf("8000-%s.localhost:%d", sb.ID, s.cfg.PreviewPort)
	if st := get(host, nil); st != http.StatusNotFound {
		t.Errorf("preview of a port not exposed: %d, want 404", st)
	}
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"port":8000,"public":true}`, tok(sb), http.StatusCreated, nil)
	if st := get(host, nil); st != http.StatusBadGateway {
		t.Errorf("preview of a port nothing listens on: %d, want 502", st)
	}
	if st := get("127.0.0.1", hdr{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "8000"}); st != http.StatusBadGateway {
		t.Errorf("preview by E2B's headers: %d, want 502", st)
	}
	// Anything else is the API's, as before.
	if st := get("127.0.0.1", nil); st != http.StatusNotFound {
		t.Errorf("GET / = %d", st)
	}
}

// streamEvents reads an NDJSON answer's events.
func streamEvents(t *testing.T, b []byte) []apitype.SnapshotBuildEvent {
	t.Helper()
	var out []apitype.SnapshotBuildEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var ev apitype.SnapshotBuildEvent
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		out = append(out, ev)
	}
	return out
}

func TestSnapshotBuildStream(t *testing.T) {
	s := newServer(t)
	nd := hdr{"Accept": apitype.ContentTypeNDJSON + "; charset=utf-8, application/json"}
	resp, b := s.doString(t, "POST", "/v1/snapshots", `{"tag":"s1","warm":"echo warming-up","pool_size":0}`, nd)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != apitype.ContentTypeNDJSON {
		t.Fatalf("stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	evs := streamEvents(t, b)
	var output strings.Builder
	for _, ev := range evs[:len(evs)-1] {
		if ev.Snapshot != nil || ev.Error != nil {
			t.Errorf("an end before the last line: %+v", ev)
		}
		output.WriteString(ev.Output)
	}
	if last := evs[len(evs)-1]; last.Snapshot == nil || last.Snapshot.Tag != "s1" {
		t.Errorf("last line %+v, want the snapshot", last)
	}
	if !strings.Contains(output.String(), "warming-up") {
		t.Errorf("output %q, want the warm command's", output.String())
	}

	// Refused before any output: a plain answer with its own status.
	resp, b = s.doString(t, "POST", "/v1/snapshots", `{"tag":"s1","warm":"true"}`, nd)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("a tag taken: %d %s", resp.StatusCode, b)
	}
	// A warm command that fails after some output: the error ends the stream.
	resp, b = s.doString(t, "POST", "/v1/snapshots", `{"tag":"s2","warm":"echo before-failing; exit 3","pool_size":0}`, nd)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a failed warm: %d %s", resp.StatusCode, b)
	} else {
		evs := streamEvents(t, b)
		last := evs[len(evs)-1]
		if last.Error == nil || last.Error.Code != apitype.CodeBadRequest || !strings.Contains(last.Error.Error, "exited 3") ||
			!strings.Contains(string(b), "before-failing") {
			t.Errorf("a failed warm: %s", b)
		}
	}
	if _, err := s.svc.Snapshot(context.Background(), "s2"); err == nil {
		t.Error("a failed build left a snapshot")
	}
}

// TestBuildStreamUTF8: a character split across writes reaches the client
// whole, and lines are sent as they are written.
func TestBuildStreamUTF8(t *testing.T) {
	rec := httptest.NewRecorder()
	st := &buildStream{w: rec}
	st.Write([]byte("a\xe2\x94")) // "━" is e2 94 81
	if !rec.Flushed {
		t.Error("the first output was not flushed")
	}
	st.Write([]byte("\x81b"))
	st.Write([]byte("\xe2"))
	srv := &Server{log: slog.New(slog.DiscardHandler)}
	srv.endStream(rec, httptest.NewRequest("POST", "/v1/snapshots", nil), st, sandbox.SnapshotInfo{Snapshot: store.Snapshot{Tag: "t"}}, nil)
	evs := streamEvents(t, rec.Body.Bytes())
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Output)
	}
	if want := []string{"a", "━b", "\uFFFD", ""}; !slices.Equal(got, want) || evs[len(evs)-1].Snapshot == nil {
		t.Errorf("outputs %q, want %q, then the snapshot", got, want)
	}
	if n, err := st.Write([]byte("late")); n != 4 || err != nil || bytes.Contains(rec.Body.Bytes(), []byte("late")) {
		t.Errorf("a write after the end: %d, %v, sent %s", n, err, rec.Body.Bytes())
	}
}
