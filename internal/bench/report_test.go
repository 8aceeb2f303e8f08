package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	seq := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = float64(i + 1)
		}
		return s
	}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 50, 0},
		{"one", []float64{7}, 50, 7},
		{"one p99", []float64{7}, 99, 7},
		{"median of 10", seq(10), 50, 5},
		{"p99 of 10 is the max", seq(10), 99, 10},
		{"median of 11", seq(11), 50, 6},
		{"p99 of 100", seq(100), 99, 99},
		{"p99 of 200", seq(200), 99, 198},
		{"p100", seq(200), 100, 200},
		{"p50 of 2", []float64{1, 2}, 50, 1},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: percentile(p%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestLatencyResult(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Millisecond+500*time.Microsecond)
	}
	r := latencyResult("exec", lat)
	if r.Name != "exec" || r.Unit != unitMs || r.N != 100 || r.P50 != 50.5 || r.P99 != 99.5 {
		t.Errorf("got %+v", r)
	}
	if r := rateResult("upload", 100e6, 2*time.Second); r.P50 != 50 || r.P99 != 50 || r.N != 1 || r.Unit != unitMBps {
		t.Errorf("rateResult = %+v", r)
	}
}

func TestReportJSON(t *testing.T) {
	rep := report{
		Machine: machine{CPU: "cpu", NProc: 2},
		Backend: "gvisor",
		Results: []result{
			{Name: "exec", Unit: unitMs, P50: 1, P99: 2, N: 3, Baseline: &baseline{Name: "runsc exec", P50: 4, P99: 5, N: 6}},
			{Name: "create", Unit: unitMs, Error: "boom"},
		},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"machine", "commit", "time", "backend", "results"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	res := m["results"].([]any)
	row := res[0].(map[string]any)
	for _, k := range []string{"name", "unit", "p50", "p99", "n", "baseline"} {
		if _, ok := row[k]; !ok {
			t.Errorf("result lacks %q", k)
		}
	}
	if _, ok := res[1].(map[string]any)["baseline"]; ok {
		t.Error("baseline present on a row without one")
	}

	var out strings.Builder
	if err := printTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"METRIC", "runsc exec 4.00 ms / 5.00 ms", "create: boom"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestProcField(t *testing.T) {
	cpuinfo := "processor\t: 0\nvendor_id\t: X\nmodel name\t: Fancy CPU @ 3GHz\n"
	if got := procField(cpuinfo, "model name"); got != "Fancy CPU @ 3GHz" {
		t.Errorf("model name = %q", got)
	}
	if got := procField("MemTotal:       16318464 kB\n", "MemTotal"); got != "16318464 kB" {
		t.Errorf("MemTotal = %q", got)
	}
}
