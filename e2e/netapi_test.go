package e2e

// The network API's calls, as raw HTTP: the REST shapes of issue 14's
// contract (network policy, exposed ports), so the tests say exactly
// what a client sends and gets.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// netPolicy is a sandbox's egress policy (apitype.NetworkPolicy).
type netPolicy struct {
	AllowCIDRs   []string `json:"allow_cidrs,omitempty"`
	DenyCIDRs    []string `json:"deny_cidrs,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"`
	DenyDomains  []string `json:"deny_domains,omitempty"`
	Presets      []string `json:"presets,omitempty"`
}

// portInfo is an exposed port (apitype.PortInfo).
type portInfo struct {
	Port     int    `json:"port"`
	Public   bool   `json:"public"`
	URL      string `json:"url"`
	HTTPSURL string `json:"https_url,omitempty"`
	Token    string `json:"token"`
}

// netInfo is a sandbox as GET shows it, with its network.
type netInfo struct {
	ID      string     `json:"id"`
	Status  string     `json:"status"`
	Token   string     `json:"token,omitempty"`
	Network netPolicy  `json:"network"`
	Ports   []portInfo `json:"ports,omitempty"`
}

// call sends a JSON request to d with its API key (and a sandbox token if
// not empty), checks the status and decodes the answer into out if not
// nil. It returns the body.
func (d *daemon) call(t *testing.T, method, path, sandboxToken string, body any, want int, out any) []byte {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/json")
	if sandboxToken != "" {
		req.Header.Set(apitype.SandboxTokenHeader, sandboxToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return b
}

// createReq is a create call's body with a network policy.
type createReq struct {
	apitype.CreateSandboxRequest
	Network *netPolicy `json:"network,omitempty"`
}

// createNet creates sandboxes with policy p (nil: none given) on d,
// deleted at the end of the test.
func createNet(t *testing.T, d *daemon, req apitype.CreateSandboxRequest, p *netPolicy) []sandbox {
	t.Helper()
	var infos []netInfo
	d.call(t, http.MethodPost, "/v1/sandboxes", req.SandboxToken, createReq{req, p}, http.StatusCreated, &infos)
	out := make([]sandbox, len(infos))
	for i, info := range infos {
		if info.Token == "" || info.Status != apitype.StatusRunning {
			t.Fatalf("created sandbox %+v: want a token and status running", info)
		}
		out[i] = sandbox{info.ID, info.Token}
	}
	t.Cleanup(func() {
		for _, sb := range out {
			d.c.DeleteSandbox(context.Background(), sb.id)
		}
	})
	return out
}

func getNet(t *testing.T, d *daemon, id string) netInfo {
	t.Helper()
	var info netInfo
	d.call(t, http.MethodGet, "/v1/sandboxes/"+id, "", nil, http.StatusOK, &info)
	return info
}

func setNetwork(t *testing.T, d *daemon, id string, p netPolicy) netInfo {
	t.Helper()
	var info netInfo
	d.call(t, http.MethodPut, "/v1/sandboxes/"+id+"/network", "", p, http.StatusOK, &info)
	return info
}

func exposePort(t *testing.T, d *daemon, sb sandbox, port int, public bool) portInfo {
	t.Helper()
	var pi portInfo
	d.call(t, http.MethodPost, "/v1/sandboxes/"+sb.id+"/ports", sb.token,
		map[string]any{"port": port, "public": public}, http.StatusCreated, &pi)
	if pi.Port != port || pi.Public != public || pi.URL == "" || (!public && pi.Token == "") {
		t.Fatalf("expose %d: %+v", port, pi)
	}
	return pi
}

// samePolicy compares policies as JSON: nil and empty lists are alike.
func samePolicy(a, b netPolicy) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func (p netPolicy) String() string {
	b, _ := json.Marshal(p)
	return string(b)
}
