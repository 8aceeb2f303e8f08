package bench

import "testing"

func TestAddColdBaseline(t *testing.T) {
	rows := []result{
		{Name: "create", Unit: unitMs, P50: 800, P99: 900, N: 10},
		{Name: "exec", Unit: unitMs, P50: 1, Baseline: &baseline{Name: "runsc exec"}},
		{Name: "spawn", Unit: unitMs, P50: 200},
		{Name: "pool_handout", Unit: unitMs},
		{Name: "spawn_100", Unit: unitMs},
		{Name: "pss_per_child", Unit: unitMiB, Baseline: &baseline{Name: "cold sandbox"}},
		{Name: "branch_pause_50", Unit: unitMs},
		{Name: "chain_depth_3", Unit: unitMs},
		{Name: "chain_depth_5_vs_0", Unit: unitRatio},
		{Name: "spawn", Unit: unitMs, Error: "failed"},
	}
	addColdBaseline(rows)
	for _, r := range rows {
		var got string
		if r.Baseline != nil {
			got = r.Baseline.Name
		}
		want := coldBaselineName
		switch {
		case r.Name == "exec":
			want = "runsc exec"
		case r.Name == "pss_per_child":
			want = "cold sandbox"
		case r.Name == "create", r.Name == "chain_depth_5_vs_0", r.Name == "branch_pause_50", r.Error != "":
			want = ""
		}
		if got != want {
			t.Errorf("%s: baseline %q, want %q", r.Name, got, want)
		}
	}
	if b := rows[2].Baseline; b.P50 != 800 || b.P99 != 900 || b.N != 10 {
		t.Errorf("baseline = %+v", b)
	}
	// Without a create row, nothing changes.
	rows = []result{{Name: "spawn", Unit: unitMs}}
	if addColdBaseline(rows); rows[0].Baseline != nil {
		t.Error("baseline without a create row")
	}
}

func TestRestoreRatio(t *testing.T) {
	rows := []result{{Name: "create", P50: 3000}, {Name: "spawn", P50: 300}}
	r, ok := restoreRatio(rows)
	if !ok || r.Name != "cold_vs_restore" || r.P50 != 10 || r.Unit != unitRatio {
		t.Fatalf("got %+v, %v", r, ok)
	}
	if _, ok := restoreRatio(rows[:1]); ok {
		t.Fatal("ratio without a spawn row")
	}
	if _, ok := restoreRatio([]result{{Name: "create", P50: 3000}, {Name: "spawn", Error: "x"}}); ok {
		t.Fatal("ratio from a failed row")
	}
}
