package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// events decodes an NDJSON answer.
func events(t *testing.T, body []byte) []apitype.OutputEvent {
	t.Helper()
	var evs []apitype.OutputEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev apitype.OutputEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("record %q: %v", sc.Bytes(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestExecStream(t *testing.T) {
	s := newServer(t)
	info := s.create(t)
	path := "/v1/sandboxes/" + info.ID + "/exec"
	stream := hdr{apitype.SandboxTokenHeader: info.Token, "Accept": apitype.ContentTypeNDJSON}

	resp, body := s.doString(t, "POST", path, `{"shell":"printf out; printf err >&2; printf '\\377' ; exit 5"}`, stream)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != apitype.ContentTypeNDJSON {
		t.Fatalf("status %d, %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	evs := events(t, body)
	got := map[string][]byte{}
	for _, ev := range evs[:len(evs)-1] {
		if ev.Exit != nil || ev.Error != nil {
			t.Fatalf("a chunk record carries an end: %+v", ev)
		}
		got[ev.Stream] = append(got[ev.Stream], ev.Bytes()...)
	}
	if string(got["stdout"]) != "out\xff" || string(got["stderr"]) != "err" {
		t.Errorf("output = %q", got)
	}
	last := evs[len(evs)-1]
	if last.Exit == nil || last.Exit.ExitCode != 5 {
		t.Errorf("last record = %+v, want exit 5", last)
	}

	// Failures before the first record are plain statuses.
	resp, body = s.doString(t, "POST", path, `{"shell":"true","user":"nobody-here"}`, stream)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("bad user: status %d, %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, _ = s.doString(t, "POST", path, `{"shell":"true"}`, hdr{"Accept": apitype.ContentTypeNDJSON})
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("no token: status %d", resp.StatusCode)
	}

	// Server-sent events carry the same records.
	resp, body = s.doString(t, "POST", path, `{"shell":"echo hi"}`, hdr{apitype.SandboxTokenHeader: info.Token, "Accept": apitype.ContentTypeSSE})
	if ct := resp.Header.Get("Content-Type"); ct != apitype.ContentTypeSSE ||
		!strings.HasPrefix(string(body), `data: {"stream":"stdout","data":"hi\n"}`+"\n\n") || !strings.Contains(string(body), `data: {"exit":{"exit_code":0`) {
		t.Errorf("SSE: %s %q", ct, body)
	}

	// Without the Accept header the answer is the buffered JSON as before.
	if r := s.exec(t, info, `{"shell":"echo hi"}`); r.Stdout != "hi\n" {
		t.Errorf("buffered exec = %+v", r)
	}
}
