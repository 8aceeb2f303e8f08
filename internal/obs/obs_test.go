package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// find is the metric of family name whose labels include want.
func find(t *testing.T, m *Metrics, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, mt := range f.Metric {
			got := map[string]string{}
			for _, l := range mt.Label {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return mt
		}
	}
	return nil
}

func TestObserveRequest(t *testing.T) {
	m := NewMetrics(Gauges{
		SandboxStates: func() map[SandboxKey]int {
			return map[SandboxKey]int{{"running", "default"}: 2, {"paused", "default"}: 1, {"running", "acme"}: 4}
		},
		PoolSizes: func() map[string]int { return map[string]int{"default": 3} },
	})
	m.ObserveRequest("POST /v1/sandboxes", "", 201, "", 2*time.Second)
	m.ObserveRequest("POST /v1/sandboxes", "spawn", 201, "", time.Second)
	m.ObserveRequest("POST /v1/sandboxes/{id}/exec", "", 404, "not_found", time.Millisecond)
	m.ObserveRequest("", "", 404, "", time.Millisecond)
	m.ObserveAgentRTT(time.Millisecond)

	tests := []struct {
		name   string
		labels map[string]string
		value  func(*dto.Metric) float64
		want   float64
	}{
		{"cove_operation_duration_seconds", map[string]string{"op": "create"}, hcount, 1},
		{"cove_operation_duration_seconds", map[string]string{"op": "spawn"}, hcount, 1},
		{"cove_http_requests_total", map[string]string{"route": "POST /v1/sandboxes", "status": "201"}, counter, 2},
		{"cove_http_errors_total", map[string]string{"route": "POST /v1/sandboxes/{id}/exec", "code": "not_found"}, counter, 1},
		{"cove_http_errors_total", map[string]string{"route": "unmatched", "code": "unknown"}, counter, 1},
		{"cove_http_request_duration_seconds", map[string]string{"route": "POST /v1/sandboxes"}, hcount, 2},
		{"cove_agent_rtt_seconds", nil, hcount, 1},
		{"cove_sandboxes", map[string]string{"state": "running", "tenant": "default"}, gauge, 2},
		{"cove_sandboxes", map[string]string{"state": "paused", "tenant": "default"}, gauge, 1},
		{"cove_sandboxes", map[string]string{"state": "running", "tenant": "acme"}, gauge, 4},
		{"cove_pool_ready", map[string]string{"snapshot": "default"}, gauge, 3},
	}
	for _, tt := range tests {
		mt := find(t, m, tt.name, tt.labels)
		if mt == nil {
			t.Errorf("%s%v missing", tt.name, tt.labels)
			continue
		}
		if got := tt.value(mt); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	// A failed exec is no exec latency.
	if mt := find(t, m, "cove_operation_duration_seconds", map[string]string{"op": "exec"}); mt != nil {
		t.Errorf("a failed exec counted as an operation: %v", mt)
	}
}

func hcount(m *dto.Metric) float64  { return float64(m.GetHistogram().GetSampleCount()) }
func counter(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
func gauge(m *dto.Metric) float64   { return m.GetGauge().GetValue() }

func TestNewRequestID(t *testing.T) {
	tests := []struct {
		in   string
		keep bool
	}{
		{"", false},
		{"abc-123", true},
		{"a.b:c_d", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"a b", false},
		{"a\"b", false},
		{"ünï", false},
	}
	for _, tt := range tests {
		got := NewRequestID(tt.in)
		if tt.keep != (got == tt.in) || !saneID(got) {
			t.Errorf("NewRequestID(%q) = %q, keep %v", tt.in, got, tt.keep)
		}
	}
	if NewRequestID("") == NewRequestID("") {
		t.Error("two fresh ids are equal")
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "api")
	ctx := WithRequest(context.Background(), &Request{ID: "req-7"})
	log.InfoContext(ctx, "one")
	log.Info("two")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines: %q", lines)
	}
	var one, two map[string]any
	json.Unmarshal([]byte(lines[0]), &one)
	json.Unmarshal([]byte(lines[1]), &two)
	if one["request_id"] != "req-7" || one["component"] != "api" {
		t.Errorf("with a request: %v", one)
	}
	if _, ok := two["request_id"]; ok {
		t.Errorf("without a request: %v", two)
	}
}

func TestAuditRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.log")
	a, err := OpenAudit(path, 300)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 5 {
		e := AuditEntry{Time: time.Unix(int64(i), 0).UTC(), RequestID: "r", Who: "api_key", Method: "POST", Route: "POST /v1/sandboxes", Status: 201}
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	if len(cur) > 300 || len(old) > 300 {
		t.Errorf("files over the bound: %d, %d bytes", len(cur), len(old))
	}
	for _, b := range [][]byte{cur, old} {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e AuditEntry
			if err := json.Unmarshal([]byte(line), &e); err != nil || e.Who != "api_key" {
				t.Errorf("line %q: %v", line, err)
			}
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	a.Close()
	if err := a.Write(AuditEntry{}); err == nil {
		t.Error("write after close succeeded")
	}
}
