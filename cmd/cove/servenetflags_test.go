package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestNetFlagsCheck(t *testing.T) {
	ok := netFlags{previewDomain: "localhost"}
	tests := []struct {
		name    string
		edit    func(*netFlags)
		wantErr string
	}{
		{"defaults", func(*netFlags) {}, ""},
		{"upstream", func(f *netFlags) { f.dnsUpstream = []string{"192.0.2.53:53", "[2001:db8::1]:53"} }, ""},
		{"upstream without port", func(f *netFlags) { f.dnsUpstream = []string{"192.0.2.53"} }, "--dns-upstream"},
		{"private", func(f *netFlags) { f.resolvPriv = []string{"10.1.0.0/16"} }, ""},
		{"private not a CIDR", func(f *netFlags) { f.resolvPriv = []string{"10.1.0.0"} }, "--resolvable-private"},
		{"cert without key", func(f *netFlags) { f.previewCert, f.previewHTTPSAddr = "c.pem", ":8443" }, "go together"},
		{"cert without https", func(f *netFlags) { f.previewCert, f.previewKey = "c.pem", "k.pem" }, "--preview-https-addr"},
		{"no domain", func(f *netFlags) { f.previewDomain = "" }, "--preview-domain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.edit(&f)
			err := f.check()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("check() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// The default presets file is optional; one given must exist.
func TestPresetsFile(t *testing.T) {
	dir := t.TempDir()
	have := filepath.Join(dir, "presets.json")
	if err := os.WriteFile(have, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	for _, tc := range []struct {
		f       netFlags
		want    string
		wantErr bool
	}{
		{netFlags{presets: have}, have, false},
		{netFlags{presets: missing}, "", false},
		{netFlags{presets: missing, presetsGiven: true}, "", true},
		{netFlags{presets: "", presetsGiven: true}, "", false},
	} {
		got, err := tc.f.presetsFile()
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%+v: presetsFile() = %q, %v", tc.f, got, err)
		}
	}
}

func TestListenPrefixes(t *testing.T) {
	got, err := listenPrefixes("127.0.0.1:8080", "", "0.0.0.0:8443", "[::1]:80", "localhost:80", "[::ffff:192.0.2.1]:1")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("192.0.2.1/32")}
	if !slices.Equal(got, want) {
		t.Errorf("listenPrefixes = %v, want %v", got, want)
	}
	if _, err := listenPrefixes("no-port"); err == nil {
		t.Error("an address without a port was accepted")
	}
}
