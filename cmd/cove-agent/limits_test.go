package main

import "testing"

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		cmdline string
		want    vmLimits
	}{
		{"console=ttyS0 quiet cove.hostname=h cove.id=sb-1", vmLimits{}},
		{"quiet cove.id=sb-1 cove.pids=1024 cove.nofile=4096", vmLimits{pids: 1024, nofile: 4096}},
		{"cove.pids=0 cove.nofile=-3 cove.pids=x", vmLimits{}},
		{"cove.pids=7\n", vmLimits{pids: 7}},
	}
	for _, tc := range tests {
		if got := parseCmdline(tc.cmdline); got != tc.want {
			t.Errorf("parseCmdline(%q) = %+v, want %+v", tc.cmdline, got, tc.want)
		}
	}
}
