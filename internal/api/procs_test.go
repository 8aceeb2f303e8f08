package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestProcesses(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	base := "/v1/sandboxes/" + sb.ID

	var p apitype.ProcessInfo
	s.call(t, "POST", base+"/exec", `{"args":["cat"],"background":true,"tag":"cat"}`, tok(sb), http.StatusCreated, &p)
	if p.Status != apitype.ProcessRunning || p.Pid == 0 || p.Tag != "cat" || !p.StdinOpen || p.StartedAt == nil {
		t.Fatalf("started %+v", p)
	}
	pid := strconv.Itoa(p.Pid)
	var sr apitype.StdinResponse
	s.call(t, "POST", base+"/processes/cat/stdin", "one\n", tok(sb), http.StatusOK, &sr)
	s.call(t, "POST", base+"/processes/"+pid+"/stdin?close=true", "two\n", tok(sb), http.StatusOK, &sr)
	if sr.Written != 4 || !sr.Closed {
		t.Errorf("stdin answer %+v", sr)
	}

	// A follow streams NDJSON to the exit.
	resp, body := s.doString(t, "GET", base+"/processes/cat/output?follow=true", "", tok(sb))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != apitype.ContentTypeNDJSON {
		t.Fatalf("follow: %d %s", resp.StatusCode, body)
	}
	var out strings.Builder
	var last apitype.OutputEvent
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		var ev apitype.OutputEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		out.Write(ev.Bytes())
		last = ev
	}
	if out.String() != "one\ntwo\n" || last.Exit == nil || last.Exit.ExitCode != 0 || last.Offset != 8 {
		t.Errorf("followed %q, last %+v", out.String(), last)
	}

	var po apitype.ProcessOutput
	s.call(t, "GET", base+"/processes/cat/output?offset=4&limit=2", "", tok(sb), http.StatusOK, &po)
	if len(po.Chunks) != 1 || po.Chunks[0].Data != "tw" || po.Chunks[0].Offset != 4 || po.NextOffset != 6 || po.Exit != nil {
		t.Errorf("poll %+v", po)
	}
	var list apitype.ProcessList
	s.call(t, "GET", base+"/processes?all=true", "", tok(sb), http.StatusOK, &list)
	if len(list.Processes) == 0 || list.Processes[0].Status != apitype.ProcessExited || list.Processes[0].OutputSize != 8 {
		t.Errorf("list %+v", list)
	}
	s.call(t, "GET", base+"/processes/"+pid, "", tok(sb), http.StatusOK, &p)
	if p.Exit == nil || p.Exit.ExitCode != 0 {
		t.Errorf("get %+v", p)
	}

	bad := []struct {
		name, method, path, body string
		want                     int
	}{
		{"unknown pid", "GET", base + "/processes/999999999", "", http.StatusNotFound},
		{"unknown tag", "GET", base + "/processes/nope/output", "", http.StatusNotFound},
		{"malformed pid", "GET", base + "/processes/-1", "", http.StatusBadRequest},
		{"bad offset", "GET", base + "/processes/cat/output?offset=x", "", http.StatusBadRequest},
		{"signal exited", "POST", base + "/processes/cat/signal", `{"signal":"TERM"}`, http.StatusConflict},
		{"stdin closed", "POST", base + "/processes/cat/stdin", "x", http.StatusConflict},
		{"bad signal body", "POST", base + "/processes/cat/signal", `{"sig":"TERM"}`, http.StatusBadRequest},
		{"stdin with background", "POST", base + "/exec", `{"args":["cat"],"background":true,"stdin":"x"}`, http.StatusBadRequest},
		{"numeric tag", "POST", base + "/exec", `{"args":["cat"],"background":true,"tag":"12"}`, http.StatusBadRequest},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) { s.call(t, tc.method, tc.path, tc.body, tok(sb), tc.want, nil) })
	}

	// A running process cannot be removed; an exited one goes.
	s.call(t, "POST", base+"/exec", `{"shell":"exec sleep 60","background":true,"tag":"sleeper"}`, tok(sb), http.StatusCreated, &p)
	s.call(t, "DELETE", base+"/processes/sleeper", "", tok(sb), http.StatusConflict, nil)
	s.call(t, "DELETE", base+"/processes/cat", "", tok(sb), http.StatusNoContent, nil)
	s.call(t, "GET", base+"/processes/cat", "", tok(sb), http.StatusNotFound, nil)

	// SIGTERM is reported as the signal that ended a process.
	s.call(t, "POST", base+"/processes/sleeper/signal", `{}`, tok(sb), http.StatusOK, nil)
	resp, body = s.doString(t, "GET", base+"/processes/sleeper/output", "", hdr{apitype.SandboxTokenHeader: sb.Token, "Accept": apitype.ContentTypeSSE})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"signal":"SIGTERM"`) || !strings.HasPrefix(string(body), "data: ") {
		t.Errorf("SSE follow of a terminated process: %d %s", resp.StatusCode, body)
	}
}
