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

// createNet creates sandboxes with policy p (nil: none given) on d,
// deleted at the end of the test.
func createNet(t *testing.T, d *daemon, req apitype.CreateSandboxRequest, p *apitype.NetworkPolicy) []sandbox {
	t.Helper()
	req.Network = p
	var infos []apitype.SandboxInfo
	d.call(t, http.MethodPost, "/v1/sandboxes", req.SandboxToken, req, http.StatusCreated, &infos)
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

func getNet(t *testing.T, d *daemon, id string) apitype.SandboxInfo {
	t.Helper()
	var info apitype.SandboxInfo
	d.call(t, http.MethodGet, "/v1/sandboxes/"+id, "", nil, http.StatusOK, &info)
	return info
}

func setNetwork(t *testing.T, d *daemon, id string, p apitype.NetworkPolicy) apitype.SandboxInfo {
	t.Helper()
	var info apitype.SandboxInfo
	d.call(t, http.MethodPut, "/v1/sandboxes/"+id+"/network", "", p, http.StatusOK, &info)
	return info
}

func exposePort(t *testing.T, d *daemon, sb sandbox, port int, public bool) apitype.PortInfo {
	t.Helper()
	var pi apitype.PortInfo
	d.call(t, http.MethodPost, "/v1/sandboxes/"+sb.id+"/ports", sb.token,
		map[string]any{"port": port, "public": public}, http.StatusCreated, &pi)
	if pi.Port != port || pi.Public != public || pi.URL == "" || (!public && pi.Token == "") {
		t.Fatalf("expose %d: %+v", port, pi)
	}
	return pi
}

// samePolicy compares policies as JSON: nil and empty lists are alike.
func samePolicy(a, b apitype.NetworkPolicy) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
