package gvisor

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cove-sandbox/cove/internal/runtime"
)

func TestLimits(t *testing.T) {
	rootfs := runtime.ImageFiles{Rootfs: "/images/x/rootfs"}
	tests := []struct {
		name     string
		spec     runtime.Spec
		flags    []string
		rlimits  []specs.POSIXRlimit
		inherit  []string
		hostPids int64 // 0: none
	}{
		{
			name:    "none: as a snapshot made before limits restores",
			spec:    runtime.Spec{ID: "sb-1", ImageFiles: rootfs},
			flags:   []string{"--overlay2=root:dir=/o"},
			rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: legacyNoFile, Soft: legacyNoFile}},
		},
		{
			name:  "all",
			spec:  runtime.Spec{ID: "sb-1", ImageFiles: rootfs, DiskMiB: 512, Pids: 1000, OpenFiles: 4096},
			flags: []string{"--overlay2=root:dir=/o,size=512M", "--fdlimit=9216"},
			rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096},
				{Type: "RLIMIT_NPROC", Hard: 1000, Soft: 1000},
			},
			inherit:  []string{"CAP_SYS_RESOURCE"},
			hostPids: 2256,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := limitFlags(tc.spec, "/o"); !slices.Equal(got, tc.flags) {
				t.Errorf("flags = %q, want %q", got, tc.flags)
			}
			s := ociSpec(tc.spec)
			if !slices.Equal(s.Process.Rlimits, tc.rlimits) {
				t.Errorf("rlimits = %+v, want %+v", s.Process.Rlimits, tc.rlimits)
			}
			c := s.Process.Capabilities
			if !slices.Equal(c.Inheritable, tc.inherit) || slices.Contains(c.Bounding, "CAP_SYS_RESOURCE") {
				t.Errorf("capabilities %+v: want only the agent to gain CAP_SYS_RESOURCE, through %v", c, tc.inherit)
			}
			var got int64
			if p := s.Linux.Resources.Pids; p != nil {
				got = *p.Limit
			}
			if got != tc.hostPids {
				t.Errorf("host pids.max = %d, want %d", got, tc.hostPids)
			}
		})
	}
}
