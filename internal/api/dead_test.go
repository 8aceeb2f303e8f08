package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestDeadSandbox(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	s.rt.Kill(sb.ID, runtime.Exit{OOMKilled: true})

	var got apitype.SandboxInfo
	for deadline := time.Now().Add(5 * time.Second); got.Status != apitype.StatusDead; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("GET = %+v, want it dead", got)
		}
		s.call(t, "GET", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusOK, &got)
	}
	if got.DeadReason != apitype.DeadOOMKilled || got.DiedAtUnix == 0 {
		t.Errorf("dead sandbox = %+v, want its reason and time of death", got)
	}
	var list []apitype.SandboxInfo
	s.call(t, "GET", "/v1/sandboxes", "", nil, http.StatusOK, &list)
	if len(list) != 1 || list[0].Status != apitype.StatusDead {
		t.Errorf("list = %+v, want the dead sandbox", list)
	}

	// Every call to it answers 410, saying why.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/exec", `{"shell":"true"}`},
		{"POST", "/ping", ""},
		{"GET", "/files?path=f", ""},
		{"POST", "/extend", `{"ttl_secs":60}`},
		{"POST", "/branch", `{}`},
	} {
		resp, b := s.doString(t, c.method, "/v1/sandboxes/"+sb.ID+c.path, c.body, tok(sb))
		var e apitype.ErrorBody
		json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusGone || e.Code != apitype.CodeGone || !strings.Contains(e.Error, "OOM") {
			t.Errorf("%s %s: %d %+v, want 410 gone saying OOM", c.method, c.path, resp.StatusCode, e)
		}
	}
	_, metrics := s.doString(t, "GET", "/metrics", "", nil)
	if !strings.Contains(string(metrics), "cove_sandboxes_died_total 1") {
		t.Errorf("metrics do not count the death:\n%s", metrics)
	}
	s.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusNoContent, nil)
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID, "", nil, http.StatusNotFound, nil)
}

func TestRetryAfter(t *testing.T) {
	// A spawn from a snapshot still being built is refused for now, with
	// when to try again.
	s := newServer(t)
	release := s.rt.HoldStarts()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.call(t, "POST", "/v1/snapshots", `{"tag":"slow","warm":"true","pool_size":0}`, nil, http.StatusCreated, nil)
	}()
	var resp *http.Response
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, b = s.doString(t, "POST", "/v1/sandboxes", `{"snapshot_tag":"slow"}`, nil)
		if resp.StatusCode != http.StatusNotFound || time.Now().After(deadline) {
			break // the tag is claimed once the build has begun
		}
	}
	release()
	<-done
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(b), apitype.CodeUnavailable) {
		t.Errorf("spawn while building: %d, Retry-After %q, %s; want 503 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}
