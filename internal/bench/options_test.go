package bench

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

func TestSelectGroups(t *testing.T) {
	full := Options{Creates: 1, Execs: 1, Evals: 1, FileMiB: 1, Spawns: 1, PoolHandouts: 1, SpawnN: 1, Branches: 1, ChainSamples: 1}
	tests := []struct {
		name       string
		only, skip string
		check      func(o Options) bool
	}{
		{"only spawn,chain", "spawn, chain", "", func(o Options) bool {
			return o.Spawns == 1 && o.ChainSamples == 1 && o.Creates == 0 && o.SpawnN == 0 && o.FileMiB == 0 && o.Branches == 0
		}},
		{"skip spawn100,transfer", "", "spawn100,transfer", func(o Options) bool {
			return o.SpawnN == 0 && o.FileMiB == 0 && o.Spawns == 1 && o.Creates == 1
		}},
	}
	for _, tt := range tests {
		o := full
		if err := o.Only.Set(tt.only); err != nil {
			t.Fatal(err)
		}
		if err := o.Skip.Set(tt.skip); err != nil {
			t.Fatal(err)
		}
		if err := o.selectGroups(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !tt.check(o) {
			t.Errorf("%s: %+v", tt.name, o)
		}
	}
	o := full
	o.Only = NameList{"spwan"}
	if err := o.selectGroups(); err == nil || !strings.Contains(err.Error(), "spawn100") {
		t.Errorf("unknown group: %v", err)
	}
}

func TestIntList(t *testing.T) {
	var got IntList
	if err := got.Set("0, 50,200,"); err != nil || !slices.Equal(got, IntList{0, 50, 200}) {
		t.Errorf("got %v, %v", got, err)
	}
	if s := got.String(); s != "0,50,200" {
		t.Errorf("String() = %q", s)
	}
	for _, bad := range []string{"-1", "50M", "x"} {
		if err := new(IntList).Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
}

func TestForQEMU(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := Defaults()
	fs.IntVar(&o.ChainSamples, "chain-samples", o.ChainSamples, "")
	fs.IntVar(&o.SpawnN, "spawn-n", o.SpawnN, "")
	if err := fs.Parse([]string{"--chain-samples", "2"}); err != nil {
		t.Fatal(err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	o.ForQEMU(given)
	if o.FileMiB != 0 || o.BaselineExecs != 0 {
		t.Errorf("not turned off: %+v", o)
	}
	if o.PoolHandouts != 10 {
		t.Errorf("pool hand-outs turned off: %+v", o)
	}
	if o.ChainSamples != 2 {
		t.Errorf("chain-samples given explicitly was overridden: %d", o.ChainSamples)
	}
	if !slices.Equal(o.SpawnNs, []int{10, 50}) || o.SpawnN != 50 {
		t.Errorf("spawn sizes %v, %d", o.SpawnNs, o.SpawnN)
	}
	if d := Defaults(); o.EgressMiB >= d.EgressMiB || o.PreviewGets >= d.PreviewGets || o.DNSLookups >= d.DNSLookups {
		t.Errorf("network benchmarks not shortened under TCG: %d MiB, %d requests, %d lookups", o.EgressMiB, o.PreviewGets, o.DNSLookups)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Options)
		want string // in the error; "" for none
	}{
		{"defaults", func(*Options) {}, ""},
		{"negative", func(o *Options) { o.Execs = -1 }, "negative"},
		{"no pool", func(o *Options) { o.PoolSize = 0 }, "--pool-size"},
		{"no pool, no hand-outs", func(o *Options) { o.PoolSize, o.PoolHandouts = 0, 0 }, ""},
		{"spawn-n too big", func(o *Options) { o.SpawnN = 1 << 20 }, "--spawn-n"},
		{"unknown skip", func(o *Options) { o.Skip = NameList{"x"} }, "--skip"},
		{"only", func(o *Options) { o.Only = NameList{"exec"} }, ""},
	}
	for _, tt := range tests {
		o := Defaults()
		tt.edit(&o)
		err := o.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
		if o.Creates != Defaults().Creates {
			t.Errorf("%s: Validate changed the options", tt.name)
		}
	}
}
