package image

import (
	"slices"
	"testing"
)

func TestBaseKey(t *testing.T) {
	r := defaultRecipe()
	k := r.key()
	if len(k) != 64 {
		t.Fatalf("key %q: want 64 hex digits", k)
	}
	if k2 := defaultRecipe().key(); k2 != k {
		t.Errorf("key not deterministic: %s != %s", k, k2)
	}
	tests := []struct {
		name   string
		change func(*recipe)
	}{
		{"version", func(r *recipe) { r.Version++ }},
		{"suite", func(r *recipe) { r.Suite = "trixie" }},
		{"package added", func(r *recipe) { r.Packages = append(slices.Clip(r.Packages), "vim") }},
		{"file content", func(r *recipe) { r.Files["/etc/hostname"] = "other\n" }},
		{"mountpoint", func(r *recipe) { r.Dirs = append(slices.Clip(r.Dirs), guestDir{"/mnt", 0o755}) }},
		{"dpkg config", func(r *recipe) { r.DpkgCfg += "path-exclude /usr/share/zoneinfo/*\n" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := defaultRecipe()
			tt.change(&r)
			if r.key() == k {
				t.Errorf("key unchanged")
			}
		})
	}
}

func TestImageKey(t *testing.T) {
	base := defaultRecipe().key()
	tests := []struct {
		name      string
		base1, b2 string
		a1, a2    []byte
		wantEqual bool
	}{
		{"same inputs", base, base, []byte("agent"), []byte("agent"), true},
		{"agent byte changed", base, base, []byte("agent v1"), []byte("agent v2"), false},
		{"agent grew", base, base, []byte("agent"), []byte("agent\x00"), false},
		{"base changed", base, "0" + base[1:], []byte("agent"), []byte("agent"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k1, k2 := imageKey(tt.base1, tt.a1), imageKey(tt.b2, tt.a2)
			if (k1 == k2) != tt.wantEqual {
				t.Errorf("imageKey equal = %v, want %v", k1 == k2, tt.wantEqual)
			}
		})
	}
}
