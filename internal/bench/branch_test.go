package bench

import (
	"fmt"
	"testing"
	"time"
)

func TestChainRows(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	lat := [][]time.Duration{ms(100, 90, 300), ms(110), ms(120), ms(130), ms(140), ms(150, 140, 500)}
	rows := chainRows(lat, 5, nil)
	if len(rows) != 7 {
		t.Fatalf("got %d rows, want 7: %+v", len(rows), rows)
	}
	for d := range 6 {
		if rows[d].Name != fmt.Sprintf("chain_depth_%d", d) || rows[d].Error != "" {
			t.Errorf("row %d = %+v", d, rows[d])
		}
	}
	if rows[0].P50 != 100 || rows[5].P50 != 150 {
		t.Errorf("medians %v, %v; want 100, 150", rows[0].P50, rows[5].P50)
	}
	if r := rows[6]; r.Name != "chain_depth_5_vs_0" || r.Unit != unitRatio || r.P50 != 1.5 || r.Error != "" {
		t.Errorf("ratio row = %+v", r)
	}

	// Failing at depth 2: 0 and 1 measured, the rest failed.
	rows = chainRows(lat[:2], 5, fmt.Errorf("depth 2: boom"))
	if len(rows) != 7 || rows[1].Error != "" || rows[2].Error != "depth 2: boom" || rows[5].Error == "" || rows[6].Error == "" {
		t.Errorf("partial chain rows = %+v", rows)
	}

	if rows := chainRows(lat[:1], 0, nil); len(rows) != 1 {
		t.Errorf("depth 0 gave %d rows, want 1 (no ratio)", len(rows))
	}
}
