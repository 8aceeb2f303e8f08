package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestMetricsObservability drives a create and execs through the real
// daemon and checks what it shows of them: the Prometheus histograms and
// gauge (behind the API key), the request id echoed and in the audit log,
// and the sandbox's own CPU and memory figures from its cgroup.
func TestMetricsObservability(t *testing.T) {
	d := suite.shared
	if code, _ := rawCall(t, "GET", d.url+"/metrics", nil, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the key: %d, want 401", code)
	}

	reqID := "e2e-metrics-" + randomHex(6)
	resp, body := callWithHeaders(t, "POST", d.url+"/v1/sandboxes", map[string]string{
		"Authorization": "Bearer " + d.key, "X-Request-Id": reqID, "Content-Type": "application/json",
	}, `{}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s\n%s", resp.StatusCode, body, d.logTail())
	}
	if got := resp.Header.Get("X-Request-Id"); got != reqID {
		t.Errorf("X-Request-Id echoed %q, want %q", got, reqID)
	}
	var infos []apitype.SandboxInfo
	if err := json.Unmarshal(body, &infos); err != nil || len(infos) != 1 {
		t.Fatalf("create answer %s: %v", body, err)
	}
	sb := sandbox{infos[0].ID, infos[0].Token}
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), sb.id) })
	execOK(t, d, sb, "true")

	m := scrape(t, d)
	for _, want := range []struct {
		re  string
		min float64
	}{
		{`cove_operation_duration_seconds_count\{op="create"\} (\S+)`, 1},
		{`cove_operation_duration_seconds_count\{op="exec"\} (\S+)`, 1},
		{`cove_sandboxes\{state="running",tenant="default"\} (\S+)`, 1},
		{`cove_http_requests_total\{route="POST /v1/sandboxes",status="201"\} (\S+)`, 1},
	} {
		mt := regexp.MustCompile(want.re).FindStringSubmatch(m)
		if mt == nil {
			t.Errorf("/metrics has no %s", want.re)
			continue
		}
		if v, _ := strconv.ParseFloat(mt[1], 64); v < want.min {
			t.Errorf("%s = %v, want at least %v", want.re, v, want.min)
		}
	}

	if e := findAudit(t, filepath.Join(d.stateDir(), "audit.log"), reqID); e == nil {
		t.Errorf("the audit log has no line with request id %s", reqID)
	} else if e["route"] != "POST /v1/sandboxes" || e["status"] != float64(201) || e["sandbox_id"] != sb.id || e["who"] != "bootstrap@default" {
		t.Errorf("the create's audit line: %v", e)
	}

	before := sandboxMetrics(t, d, sb.id)
	if !before.Cgroup || before.MemoryBytes <= 0 {
		t.Fatalf("sandbox metrics before the loop: %+v, want cgroup figures and memory > 0", before)
	}
	execOK(t, d, sb, `end=$(($(date +%s)+2)); while [ "$(date +%s)" -lt "$end" ]; do :; done`)
	after := sandboxMetrics(t, d, sb.id)
	if after.CPUSeconds <= before.CPUSeconds {
		t.Errorf("cpu_seconds did not grow over a busy loop: %v then %v", before.CPUSeconds, after.CPUSeconds)
	}
	t.Logf("sandbox metrics before %+v, after %+v", before, after)
}

func scrape(t *testing.T, d *daemon) string {
	t.Helper()
	code, b := rawCall(t, "GET", d.url+"/metrics", map[string]string{"Authorization": "Bearer " + d.key}, "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, b)
	}
	return string(b)
}

func sandboxMetrics(t *testing.T, d *daemon, id string) apitype.SandboxMetrics {
	t.Helper()
	m, err := d.c.SandboxMetrics(context.Background(), id)
	if err != nil {
		t.Fatalf("sandbox metrics: %v", err)
	}
	return m
}

// findAudit is the audit line of request id, or nil.
func findAudit(t *testing.T, path, id string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if e["request_id"] == id {
			return e
		}
	}
	return nil
}
