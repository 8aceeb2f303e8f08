package sandbox

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
)

func TestValidateLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name   string
		labels map[string]string
		ok     bool
	}{
		{"none", nil, true},
		{"every key character", map[string]string{"a-z.0_9/x": "any Value, even spaces"}, true},
		{"longest key and value", map[string]string{strings.Repeat("k", MaxLabelKey): strings.Repeat("v", MaxLabelValue)}, true},
		{"empty value", map[string]string{"k": ""}, true},
		{"empty key", map[string]string{"": "v"}, false},
		{"key too long", map[string]string{strings.Repeat("k", MaxLabelKey+1): "v"}, false},
		{"upper case", map[string]string{"Team": "v"}, false},
		{"space", map[string]string{"a b": "v"}, false},
		{"equals", map[string]string{"a=b": "v"}, false},
		{"non-ASCII", map[string]string{"é": "v"}, false},
		{"value too long", map[string]string{"k": strings.Repeat("v", MaxLabelValue+1)}, false},
		{"too many", many, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateLabels(tt.labels)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateLabels = %v, want ok %v", err, tt.ok)
			}
			if err != nil {
				wantErr(t, err, ErrInvalid)
			}
		})
	}
}

func TestParseLabelFilter(t *testing.T) {
	tests := []struct {
		in   []string
		want map[string]string // nil: an error
	}{
		{nil, map[string]string{}},
		{[]string{"a=1", "b=x=y"}, map[string]string{"a": "1", "b": "x=y"}},
		{[]string{"a="}, map[string]string{"a": ""}},
		{[]string{"a=1", "a=1"}, map[string]string{"a": "1"}},
		{[]string{"a"}, nil},
		{[]string{"=1"}, nil},
		{[]string{"A=1"}, nil},
		{[]string{"a=1", "a=2"}, nil},
	}
	for _, tt := range tests {
		got, err := ParseLabelFilter(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("ParseLabelFilter(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tt.want) {
			t.Errorf("ParseLabelFilter(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if !MatchLabels(map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}) ||
		MatchLabels(map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"}) ||
		MatchLabels(map[string]string{"a": "2"}, map[string]string{"a": "1"}) {
		t.Error("MatchLabels")
	}
}

// Labels and the default user go to a branch's snapshot and children, and
// a spawn's own replace them; they survive a restart. The fake runtime's
// agent runs on the host, whose /etc/passwd has nobody.
func TestMetaInheritance(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	src := e.createOne(t, CreateOptions{Labels: map[string]string{"team": "a"}, User: "nobody"})
	if src.Labels["team"] != "a" || src.User != "nobody" {
		t.Fatalf("created %v %q", src.Labels, src.User)
	}
	br, err := e.open(t, src.ID, src.Token).Branch(ctx, BranchOptions{Tag: "br", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c := br.Children[0]; c.Labels["team"] != "a" || c.User != "nobody" {
		t.Errorf("branch child: %v %q", c.Labels, c.User)
	}
	own := e.createOne(t, CreateOptions{SnapshotTag: "br", SnapshotToken: src.Token, Labels: map[string]string{}, User: RootUser})
	if len(own.Labels) != 0 || own.User != "" {
		t.Errorf("spawn with its own: %v %q", own.Labels, own.User)
	}
	kept := e.createOne(t, CreateOptions{SnapshotTag: "br", SnapshotToken: src.Token})
	if kept.Labels["team"] != "a" || kept.User != "nobody" {
		t.Errorf("spawn: %v %q", kept.Labels, kept.User)
	}
	_, err = e.svc.Create(ctx, CreateOptions{SnapshotTag: "br", SnapshotToken: src.Token, User: "nobody-here"})
	wantErr(t, err, ErrInvalid)

	// A branch's own replace the source's; a bad one saves nothing.
	br2, err := e.open(t, src.ID, src.Token).Branch(ctx, BranchOptions{Tag: "br2", N: 1, Labels: map[string]string{"team": "b"}, User: RootUser})
	if err != nil {
		t.Fatal(err)
	}
	if c := br2.Children[0]; c.Labels["team"] != "b" || c.User != "" {
		t.Errorf("branch child with its own: %v %q", c.Labels, c.User)
	}
	checkpoints := len(e.rt.Checkpoints())
	for _, o := range []BranchOptions{{Tag: "bad1", User: "nobody-here"}, {Tag: "bad2", Labels: map[string]string{"Bad": ""}}} {
		_, err := e.open(t, src.ID, src.Token).Branch(ctx, o)
		wantErr(t, err, ErrInvalid)
	}
	if n := len(e.rt.Checkpoints()); n != checkpoints {
		t.Errorf("refused branches checkpointed: %d, then %d", checkpoints, n)
	}
	e.restart(t)
	if got, err := e.svc.Get(context.Background(), kept.ID); err != nil || got.Labels["team"] != "a" || got.User != "nobody" {
		t.Errorf("after a restart: %+v, %v", got, err)
	}
}

// A sandbox handed out from a warm pool, restored before the call, takes
// the call's labels and user, and keeps them in its record.
func TestMetaFromPool(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PoolMemoryMiB = 2 * testLimits.DefaultMemoryMiB })
	e.build(t, BuildOptions{Tag: "warm", PoolSize: 1})
	waitFor(t, "the pool to fill", func() bool { s, _ := e.svc.Snapshot(context.Background(), "warm"); return s.PoolReady == 1 })
	info := e.createOne(t, CreateOptions{SnapshotTag: "warm", Labels: map[string]string{"from": "pool"}, User: "nobody"})
	if n := e.svc.Stats().PoolHits.Load(); n != 1 {
		t.Fatalf("pool hits %d, want 1", n)
	}
	if info.Labels["from"] != "pool" || info.User != "nobody" {
		t.Errorf("pooled sandbox: %v %q", info.Labels, info.User)
	}
	if rec := e.row(t, info.ID); rec.User != "nobody" || rec.LabelsJSON != `{"from":"pool"}` {
		t.Errorf("record %+v", rec.Meta)
	}
}
