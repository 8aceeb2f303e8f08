package main

import (
	"flag"
	"slices"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestAccelOf(t *testing.T) {
	for _, c := range []struct {
		info apitype.Info
		want string
	}{
		{apitype.Info{Backend: "gvisor", RuntimeVer: "runsc x"}, ""},
		{apitype.Info{Backend: "qemu", RuntimeVer: "QEMU emulator version 7.2.22 (tcg)"}, "tcg"},
		{apitype.Info{Backend: "qemu", RuntimeVer: "QEMU emulator version 7.2.22 (kvm)"}, "kvm"},
		{apitype.Info{Backend: "qemu", BackendReason: "chosen with --backend qemu --accel tcg"}, "tcg"},
		{apitype.Info{Backend: "qemu"}, "unknown"},
	} {
		if got := accelOf(c.info); got != c.want {
			t.Errorf("accelOf(%+v) = %q, want %q", c.info, got, c.want)
		}
	}
}

func TestRestoreRatio(t *testing.T) {
	rows := []benchResult{{Name: "create", P50: 3000}, {Name: "spawn", P50: 300}}
	r, ok := restoreRatio(rows)
	if !ok || r.Name != "cold_vs_restore" || r.P50 != 10 || r.Unit != unitRatio {
		t.Fatalf("got %+v, %v", r, ok)
	}
	if _, ok := restoreRatio(rows[:1]); ok {
		t.Fatal("ratio without a spawn row")
	}
	if _, ok := restoreRatio([]benchResult{{Name: "create", P50: 3000}, {Name: "spawn", Error: "x"}}); ok {
		t.Fatal("ratio from a failed row")
	}
}

func TestQemuBenchDefaults(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := benchOpts{fileMiB: 1024, poolHandouts: 10, chainSamples: 3, spawnN: 100, baselineExecs: 20}
	fs.IntVar(&o.chainSamples, "chain-samples", 3, "")
	fs.IntVar(&o.spawnN, "spawn-n", 100, "")
	if err := fs.Parse([]string{"--chain-samples", "2"}); err != nil {
		t.Fatal(err)
	}
	qemuBenchDefaults(fs, &o)
	if o.fileMiB != 0 || o.baselineExecs != 0 {
		t.Errorf("not turned off: %+v", o)
	}
	if o.poolHandouts != 10 {
		t.Errorf("pool hand-outs turned off: %+v", o)
	}
	if o.chainSamples != 2 {
		t.Errorf("chain-samples given explicitly was overridden: %d", o.chainSamples)
	}
	if !slices.Equal(o.spawnNs, []int{10, 50}) || o.spawnN != 50 {
		t.Errorf("spawn sizes %v, %d", o.spawnNs, o.spawnN)
	}
}
