package api

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestLabels(t *testing.T) {
	s := newServer(t)
	var a, b []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{"labels":{"team":"x","env":"dev"}}`, nil, http.StatusCreated, &a)
	s.call(t, "POST", "/v1/sandboxes", `{"labels":{"team":"x","env":"prod"}}`, nil, http.StatusCreated, &b)
	s.create(t)
	if a[0].Labels["env"] != "dev" {
		t.Errorf("create answered labels %v", a[0].Labels)
	}
	var got apitype.SandboxInfo
	s.call(t, "GET", "/v1/sandboxes/"+a[0].ID, "", nil, http.StatusOK, &got)
	if got.Labels["team"] != "x" || len(got.Labels) != 2 {
		t.Errorf("get: labels %v", got.Labels)
	}
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"", []string{a[0].ID, b[0].ID, ""}},
		{"?label=team=x", []string{a[0].ID, b[0].ID}},
		{"?label=team=x&label=env=prod", []string{b[0].ID}},
		{"?label=team=y", nil},
		{"?label=empty=", nil},
	} {
		var list []apitype.SandboxInfo
		s.call(t, "GET", "/v1/sandboxes"+tt.query, "", nil, http.StatusOK, &list)
		if len(list) != len(tt.want) {
			t.Errorf("list%s: %d sandboxes, want %d", tt.query, len(list), len(tt.want))
			continue
		}
		for i, id := range tt.want {
			if id != "" && list[i].ID != id {
				t.Errorf("list%s[%d] = %s, want %s", tt.query, i, list[i].ID, id)
			}
		}
	}
}

func TestLabelsBadInput(t *testing.T) {
	s := newServer(t)
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	for _, body := range []string{
		`{"labels":{"Team":"x"}}`,
		`{"labels":{"":"x"}}`,
		`{"labels":{"a b":"x"}}`,
		`{"labels":{"` + strings.Repeat("k", 64) + `":"x"}}`,
		`{"labels":{"k":"` + strings.Repeat("v", 257) + `"}}`,
		`{"labels":{` + strings.Join(many, ",") + `}}`,
		`{"user":"nobody-here"}`,
		`{"user":"bad:name"}`,
	} {
		resp, out := s.doString(t, "POST", "/v1/sandboxes", body, nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("create %.60s: status %d, want 400; body %s", body, resp.StatusCode, out)
		}
	}
	if n := s.svc.Count(); n != 0 {
		t.Errorf("bad creates left %d sandboxes", n)
	}
	for _, q := range []string{"label=team", "label==x", "label=Team=x", "label=a=1&label=a=2"} {
		resp, out := s.doString(t, "GET", "/v1/sandboxes?"+q, "", nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("list ?%s: status %d, want 400; body %s", q, resp.StatusCode, out)
		}
	}
}

// TestUsers runs as the host's nobody (the fake runtime's agent is on the
// host), so it needs root.
func TestUsers(t *testing.T) {
	s := newServer(t)
	info := s.create(t)
	resp, out := s.doString(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", `{"shell":"true","user":"nobody-here"}`, tok(info))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "no user nobody-here in the sandbox") {
		t.Errorf("exec as nobody-here: %d %s", resp.StatusCode, out)
	}
	resp, out = s.doString(t, "PUT", "/v1/sandboxes/"+info.ID+"/files?path=f&user=nobody-here", "x", tok(info))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("put as nobody-here: %d %s", resp.StatusCode, out)
	}
	if testing.Short() || !isRoot() {
		return
	}
	var made []apitype.SandboxInfo
	s.call(t, "POST", "/v1/sandboxes", `{"user":"nobody"}`, nil, http.StatusCreated, &made)
	if made[0].User != "nobody" {
		t.Errorf("create answered user %q", made[0].User)
	}
	for body, want := range map[string]string{
		`{"shell":"id -un","cwd":"/"}`:               "nobody",
		`{"shell":"id -un","cwd":"/","user":"root"}`: "root",
	} {
		if r := s.exec(t, made[0], body); strings.TrimSpace(r.Stdout) != want {
			t.Errorf("exec %s: %q (%s), want %s", body, r.Stdout, r.Stderr, want)
		}
	}
}

func isRoot() bool { return os.Geteuid() == 0 }
