package bench

import (
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    time.Duration
		wantErr bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 20 30 9999 500 4 5 6 0 0", 1650 * time.Millisecond, false},
		{"cpu 0 0 0 100 0 0 0 0", 0, false},
		{"cpu0 1 2 3 4 5 6 7 8", 0, true},
		{"cpu 1 2", 0, true},
		{"cpu 1 x 3 4 5 6 7 8", 0, true},
	} {
		got, err := parseCPULine(tc.line)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseCPULine(%q) = %v, %v; want %v, error %v", tc.line, got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := hostCPU(); err != nil {
		t.Errorf("hostCPU on this host: %v", err)
	}
}
