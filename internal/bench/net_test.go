package bench

import "testing"

func TestRateSamples(t *testing.T) {
	r := rateSamples("egress", []float64{120, 90.5, 150})
	if r.Unit != unitMBps || r.N != 3 || r.P50 != 120 || r.P99 != 90.5 {
		t.Errorf("rateSamples = %+v, want p50 120 and the slowest, 90.5, as p99", r)
	}
}

func TestHostNetns(t *testing.T) {
	for _, tc := range []struct{ backend, want string }{
		{"gvisor", "cove-sb-1-h"},
		{"qemu", "cove-sb-1-v"},
	} {
		if got := hostNetns(tc.backend, "sb-1"); got != tc.want {
			t.Errorf("hostNetns(%s) = %s, want %s", tc.backend, got, tc.want)
		}
	}
}

func TestNetWanted(t *testing.T) {
	o := Defaults()
	if !o.netWanted() {
		t.Error("the defaults run no network benchmark")
	}
	o.Only = NameList{"exec"}
	if err := o.selectGroups(); err != nil || o.netWanted() {
		t.Errorf("--only exec: network benchmarks wanted (%v)", err)
	}
	o = Defaults()
	o.Only = NameList{"dns"}
	if err := o.selectGroups(); err != nil || !o.netWanted() || o.EgressMiB != 0 || o.PreviewGets != 0 {
		t.Errorf("--only dns: %+v (%v)", o, err)
	}
}
