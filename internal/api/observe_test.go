package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/obs"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestMetricsRegistry checks what /metrics shows after a create, a spawn,
// an exec, a ping and an error, and that it takes the API key.
func TestMetricsRegistry(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	s.call(t, "POST", "/v1/sandboxes", `{"n":2}`, nil, http.StatusCreated, nil)
	s.exec(t, sb, `{"shell":"true"}`)
	s.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/ping", "", tok(sb), http.StatusOK, nil)
	s.call(t, "GET", "/v1/sandboxes/nope", "", nil, http.StatusNotFound, nil)
	s.call(t, "GET", "/metrics", "", hdr{"Authorization": "Bearer wrong"}, http.StatusUnauthorized, nil)

	mb := s.call(t, "GET", "/metrics", "", nil, http.StatusOK, nil)
	for _, line := range []string{
		`cove_operation_duration_seconds_count{op="create"} 1`,
		`cove_operation_duration_seconds_count{op="spawn"} 1`,
		`cove_operation_duration_seconds_count{op="exec"} 1`,
		`cove_sandboxes{state="running",tenant="default"} 3`,
		`cove_agent_rtt_seconds_count 1`,
		`cove_http_requests_total{route="POST /v1/sandboxes",status="201"} 2`,
		`cove_http_requests_total{route="GET /v1/sandboxes/{id}",status="404"} 1`,
		`cove_http_errors_total{code="not_found",route="GET /v1/sandboxes/{id}"} 1`,
		`cove_http_errors_total{code="unauthorized",route="GET /metrics"} 1`,
		`# TYPE go_goroutines gauge`,
	} {
		if !bytes.Contains(mb, []byte(line+" ")) && !bytes.Contains(mb, []byte(line+"\n")) {
			t.Errorf("metrics lack %q", line)
		}
	}
	// Route patterns, never paths: no sandbox id in any label.
	if bytes.Contains(mb, []byte(sb.ID)) {
		t.Errorf("a sandbox id is in a metric label:\n%s", mb)
	}
}

// TestRequestID checks the id is echoed, honoured when sane, and named in
// error bodies.
func TestRequestID(t *testing.T) {
	s := newServer(t)
	tests := []struct {
		name, in string
		keep     bool
	}{
		{"none", "", false},
		{"sane", "req-123_abc.9:x", true},
		{"spaces", "a b", false},
		{"too long", strings.Repeat("a", 129), false},
		{"semicolon", "a;b", false},
		{"non-ASCII", "caf\xc3\xa9", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := s.doString(t, "GET", "/v1/sandboxes/nope", "", hdr{obs.RequestIDHeader: tt.in})
			id := resp.Header.Get(obs.RequestIDHeader)
			if id == "" || (tt.keep && id != tt.in) || (!tt.keep && id == tt.in) {
				t.Fatalf("X-Request-Id %q for %q", id, tt.in)
			}
			var e apitype.ErrorBody
			if err := json.Unmarshal(b, &e); err != nil || e.RequestID != id || e.Code != apitype.CodeNotFound {
				t.Fatalf("error body %s (%v), want request_id %q", b, err, id)
			}
		})
	}
}

// TestAuditLog checks mutating calls get one JSON line each, with who,
// what, the result and the request id; reads get none.
func TestAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := obs.OpenAudit(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	s := newServer(t, func(c *Config) { c.Audit = a })

	resp, b := s.doString(t, "POST", "/v1/sandboxes", "{}", hdr{obs.RequestIDHeader: "create-1"})
	var created []apitype.SandboxInfo
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &created) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	sb := created[0]
	s.exec(t, sb, `{"shell":"true"}`)
	s.call(t, "GET", "/v1/sandboxes", "", nil, http.StatusOK, nil)
	s.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, "", hdr{"Authorization": "Bearer wrong"}, http.StatusUnauthorized, nil)

	lines := readAudit(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3 (create, exec, refused delete): %+v", len(lines), lines)
	}
	want := []obs.AuditEntry{
		{RequestID: "create-1", Who: "bootstrap@default", Method: "POST", Route: "POST /v1/sandboxes", SandboxID: sb.ID, Status: 201},
		{Who: "bootstrap@default+sandbox_token", Method: "POST", Route: "POST /v1/sandboxes/{id}/exec", SandboxID: sb.ID, Status: 200},
		{Who: "anonymous", Method: "DELETE", Route: "DELETE /v1/sandboxes/{id}", SandboxID: sb.ID, Status: 401, Code: apitype.CodeUnauthorized},
	}
	for i, w := range want {
		g := lines[i]
		if g.Time.IsZero() || g.RequestID == "" {
			t.Errorf("line %d lacks time or request id: %+v", i, g)
		}
		if w.RequestID == "" {
			w.RequestID = g.RequestID
		}
		g.Time, g.DurationMs, g.Remote = w.Time, 0, ""
		if g != w {
			t.Errorf("line %d = %+v\nwant %+v", i, g, w)
		}
	}
}

func readAudit(t *testing.T, path string) []obs.AuditEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []obs.AuditEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e obs.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestSandboxMetrics checks GET /v1/sandboxes/{id}/metrics over a fake
// cgroup reader.
func TestSandboxMetrics(t *testing.T) {
	usage := map[string]cgroup.Usage{}
	var log syncBuffer
	s := newServer(t, func(c *Config) {
		c.Logger = slog.New(obs.NewLogHandler(slog.NewTextHandler(&log, nil)))
		c.ReadUsage = func(id string) (cgroup.Usage, error) {
			u, ok := usage[id]
			if !ok {
				return cgroup.Usage{}, cgroup.ErrNoCgroup
			}
			if u.Pids < 0 {
				return cgroup.Usage{}, errors.New("cgroup: read failed")
			}
			return u, nil
		}
	})
	sb := s.create(t)
	var m apitype.SandboxMetrics
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/metrics", "", nil, http.StatusOK, &m)
	if m.Cgroup || m.ID != sb.ID || m.MemoryLimitBytes != int64(sb.MemoryMiB)<<20 {
		t.Errorf("without a cgroup: %+v", m)
	}
	usage[sb.ID] = cgroup.Usage{CPUSeconds: 1.5, MemoryBytes: 10 << 20, MemoryPeakBytes: 12 << 20, DiskWriteBytes: 4096, Pids: 5}
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/metrics", "", nil, http.StatusOK, &m)
	if !m.Cgroup || m.CPUSeconds != 1.5 || m.MemoryBytes != 10<<20 || m.MemoryPeakBytes != 12<<20 || m.DiskWrittenBytes != 4096 || m.Pids != 5 || m.Status != "running" {
		t.Errorf("with a cgroup: %+v", m)
	}
	// A failure the daemon logs names the request's id in the log line.
	usage[sb.ID] = cgroup.Usage{Pids: -1}
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/metrics", "", hdr{obs.RequestIDHeader: "log-check-1"}, http.StatusInternalServerError, nil)
	if line := grepLine(log.String(), "request failed"); !strings.Contains(line, "request_id=log-check-1") {
		t.Errorf("the failure's log line lacks its request id: %q", line)
	}
	s.call(t, "GET", "/v1/sandboxes/nope/metrics", "", nil, http.StatusNotFound, nil)
	s.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/metrics", "", hdr{"Authorization": "Bearer wrong"}, http.StatusUnauthorized, nil)
}

// grepLine is the first line of s holding sub.
func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestOperationRoutes checks every route the metrics time as an operation
// is one the API serves, so a renamed route cannot silently stop counting.
func TestOperationRoutes(t *testing.T) {
	s := New(Config{APIKey: testKey})
	for _, route := range obs.OperationRoutes() {
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer("{id}", "sb-x", "{tag}", "t").Replace(path)
		r, err := http.NewRequest(method, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, pattern := s.mux.Handler(r); pattern != route {
			t.Errorf("%s: the API serves it as %q", route, pattern)
		}
	}
}
