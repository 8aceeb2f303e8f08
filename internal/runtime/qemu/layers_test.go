package qemu

import "testing"

func TestLayerNames(t *testing.T) {
	for _, tc := range []struct {
		chain      []string
		next       int
		activeNode string
	}{
		{[]string{"disk-0.qcow2"}, 1, "root"},
		{[]string{"disk-0.qcow2", "disk-1.qcow2"}, 2, "root1"},
		// A flattened chain skips numbers: the next stays above them all.
		{[]string{"disk-0.qcow2", "disk-7.qcow2"}, 8, "root7"},
		{[]string{"disk-2.qcow2", "disk-10.qcow2"}, 11, "root10"},
	} {
		if got := nextLayer(tc.chain); got != tc.next {
			t.Errorf("nextLayer(%v) = %d, want %d", tc.chain, got, tc.next)
		}
		if got := activeNode(&vmState{Layers: tc.chain}); got != tc.activeNode {
			t.Errorf("activeNode(%v) = %q, want %q", tc.chain, got, tc.activeNode)
		}
	}
}
