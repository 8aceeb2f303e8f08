package bench

// What a run adds to its measured rows: the project's targets, the cold
// create baseline beside the snapshot rows, and the ratio of a cold boot
// to a restore.

import (
	"slices"
	"strings"
)

// target is the goal for a result, where the project has one.
func target(backend, name string) string {
	if name == "restart_healthz" {
		return "<= 2 s" // issue 13's, with 5 dead sandboxes recorded
	}
	if backend == "qemu" {
		// Issue 5's targets, set for TCG; issue 19's restore.
		switch name {
		case "spawn":
			return "restore p50 <= 150 ms"
		case "pss_per_child":
			return "<= 35 MiB"
		case "pool_handout":
			return "p50 <= 10 ms"
		case "branch_stopped_0", "branch_stopped_50", "branch_stopped_200":
			// The design's "pause window (source paused)": QEMU's own
			// STOP to RESUME. What the agent sees (branch_pause_*)
			// adds the guest's slowness under TCG during the pre-copy.
			return "p50 <= 10 ms"
		}
		return ""
	}
	// Issue 19's, on a 2-core host.
	switch name {
	case "exec":
		return "p50 <= half of runsc exec"
	case "eval":
		return "p50 <= 2 ms"
	case "ping":
		return "p50 <= 1 ms"
	case "upload", "download":
		return ">= 250 MB/s"
	case "spawn":
		return "cold restore p50 <= 150 ms"
	case "pool_handout":
		return "p50 <= 10 ms"
	case "spawn_100":
		return "<= 7 s"
	case "pss_per_child":
		return "<= 30 MiB"
	case "branch_pause_50_loaded":
		return "p50 <= 50 ms"
	case chainRatioName(5):
		return "<= 1.5x"
	}
	switch {
	case strings.HasPrefix(name, "spawn_") && strings.HasSuffix(name, "_vs_0"):
		return "<= 1.2x"
	case strings.HasPrefix(name, "kill_"):
		return "<= 10 s for 500"
	}
	return ""
}

// coldBaselineName names the cold create baseline beside spawn rows.
const coldBaselineName = "cold create"

// isSpawnRow reports whether the row is a snapshot benchmark's latency,
// which is shown beside the cold create baseline.
func isSpawnRow(name string) bool {
	switch {
	case name == "spawn", name == "pool_handout",
		strings.HasPrefix(name, "spawn_"),
		strings.HasPrefix(name, "chain_depth_") && !strings.HasSuffix(name, "_vs_0"):
		return true
	}
	return false
}

// createRow is the index of the successful create row, or -1.
func createRow(rows []result) int {
	return slices.IndexFunc(rows, func(r result) bool { return r.Name == "create" && r.Error == "" })
}

// addColdBaseline sets the baseline of the snapshot benchmarks' latency
// rows to the create row of the same run, if it succeeded.
func addColdBaseline(rows []result) {
	i := createRow(rows)
	if i < 0 {
		return
	}
	cold := rows[i]
	for j := range rows {
		r := &rows[j]
		if isSpawnRow(r.Name) && r.Unit == unitMs && r.Baseline == nil && r.Error == "" {
			r.Baseline = &baseline{Name: coldBaselineName, P50: cold.P50, P99: cold.P99, N: cold.N}
		}
	}
}

// restoreRatio is how many times faster a restore from a snapshot is than
// a cold boot, from the create and spawn rows of one run.
func restoreRatio(rows []result) (result, bool) {
	i := createRow(rows)
	j := slices.IndexFunc(rows, func(r result) bool { return r.Name == "spawn" && r.Error == "" })
	if i < 0 || j < 0 || rows[j].P50 <= 0 {
		return result{}, false
	}
	x := round3(rows[i].P50 / rows[j].P50)
	return result{Name: "cold_vs_restore", Unit: unitRatio, P50: x, P99: x, N: 1}, true
}
