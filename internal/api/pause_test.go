package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestPauseRoutes(t *testing.T) {
	s := newServer(t)
	var made []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{"on_expiry":"pause"}`, nil, http.StatusCreated, &made)
	id, tok := made[0].ID, hdr{apitype.SandboxTokenHeader: made[0].Token}
	if made[0].OnExpiry != apitype.OnExpiryPause || made[0].AutoResume {
		t.Fatalf("created: %+v", made[0])
	}
	s.call(t, "POST", "/v1/sandboxes", `{"on_expiry":"never"}`, nil, http.StatusBadRequest, nil)

	var c apitype.CheckpointInfo
	s.call(t, "POST", "/v1/sandboxes/"+id+"/checkpoints", `{"name":"c1"}`, tok, http.StatusCreated, &c)
	if c.Name != "c1" || c.SizeBytes <= 0 {
		t.Fatalf("checkpoint: %+v", c)
	}
	for _, tc := range []struct {
		method, path, body string
		h                  hdr
		want               int
	}{
		{"POST", "/checkpoints", `{"name":"c1"}`, tok, http.StatusConflict},
		{"POST", "/checkpoints", `{"name":"a/b"}`, tok, http.StatusBadRequest},
		{"POST", "/checkpoints", `{"name":"c2"}`, nil, http.StatusForbidden},
		{"POST", "/rollback", `{"checkpoint":"nope"}`, tok, http.StatusNotFound},
		{"POST", "/rollback", `{}`, tok, http.StatusBadRequest},
		{"POST", "/rollback", `{"checkpoint":"c1","x":1}`, tok, http.StatusBadRequest},
		{"POST", "/resume", ``, nil, http.StatusConflict},
	} {
		s.call(t, tc.method, "/v1/sandboxes/"+id+tc.path, tc.body, tc.h, tc.want, nil)
	}
	var cs apitype.CheckpointsResponse
	s.call(t, "GET", "/v1/sandboxes/"+id+"/checkpoints", "", tok, http.StatusOK, &cs)
	if len(cs.Checkpoints) != 1 {
		t.Fatalf("checkpoints: %+v", cs)
	}
	s.call(t, "POST", "/v1/sandboxes/"+id+"/rollback", `{"checkpoint":"c1"}`, tok, http.StatusOK, nil)

	var p apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes/"+id+"/pause", "", nil, http.StatusOK, &p)
	if p.Status != apitype.StatusPaused || p.PausedBytes <= 0 || p.DiskBytes != p.PausedBytes+p.CheckpointBytes || p.RemainingTTLSecs <= 0 {
		t.Fatalf("paused: %+v", p)
	}
	b := s.call(t, "POST", "/v1/sandboxes/"+id+"/exec", `{"shell":"true"}`, tok, http.StatusConflict, nil)
	if !strings.Contains(string(b), "paused: resume it") {
		t.Fatalf("exec in a paused sandbox: %s", b)
	}
	s.call(t, "POST", "/v1/sandboxes/"+id+"/pause", "", nil, http.StatusConflict, nil)
	s.call(t, "POST", "/v1/sandboxes/"+id+"/resume", `{"ttl_secs":60}`, nil, http.StatusOK, &p)
	if p.Status != apitype.StatusRunning {
		t.Fatalf("resumed: %+v", p)
	}
	s.call(t, "POST", "/v1/sandboxes/"+id+"/exec", `{"shell":"true"}`, tok, http.StatusOK, nil)
	s.call(t, "POST", "/v1/sandboxes/nope/pause", "", nil, http.StatusNotFound, nil)
}
