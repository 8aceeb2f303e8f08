package netpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestIsZero(t *testing.T) {
	if !(Policy{}).IsZero() {
		t.Error("the zero Policy is not zero")
	}
	for _, p := range []Policy{
		{AllowCIDRs: []string{"1.2.3.4/32"}}, {DenyCIDRs: []string{"1.2.3.4/32"}},
		{AllowDomains: []string{"a.org"}}, {DenyDomains: []string{"a.org"}}, {Presets: []string{"pypi"}},
	} {
		if p.IsZero() {
			t.Errorf("%+v is zero", p)
		}
	}
}

func TestValidate(t *testing.T) {
	m, err := New(Config{Upstream: []string{"127.0.0.1:53"}, Presets: map[string]Policy{"pypi": {AllowDomains: []string{"pypi.org"}}}})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, maxEntries+1)
	for i := range many {
		many[i] = "a.org"
	}
	for _, tc := range []struct {
		name string
		p    Policy
		bad  string // in the error; "" for valid
	}{
		{"zero", Policy{}, ""},
		{"v4 and v6 CIDRs", Policy{AllowCIDRs: []string{"10.99.0.0/16", "2001:db8::/32"}, DenyCIDRs: []string{"0.0.0.0/0", "::/0"}}, ""},
		{"bare address", Policy{AllowCIDRs: []string{"192.0.2.7", "2001:db8::1"}}, ""},
		{"host bits set", Policy{AllowCIDRs: []string{"10.99.0.5/24"}}, ""},
		{"domains", Policy{AllowDomains: []string{"example.org", "*.example.org", "a-b.c_d.example", "x.io"}, DenyDomains: []string{"*.org"}}, ""},
		{"single label", Policy{AllowDomains: []string{"registry"}}, ""},
		{"preset", Policy{Presets: []string{"pypi"}}, ""},
		{"bad CIDR", Policy{AllowCIDRs: []string{"10.99.0.0/33"}}, "allow_cidrs"},
		{"not an address", Policy{DenyCIDRs: []string{"example.org"}}, "deny_cidrs"},
		{"zone", Policy{AllowCIDRs: []string{"fe80::1%eth0"}}, "allow_cidrs"},
		{"4in6", Policy{AllowCIDRs: []string{"::ffff:10.0.0.0/104"}}, "IPv4 form"},
		{"bare star", Policy{AllowDomains: []string{"*"}}, "hostname"},
		{"empty", Policy{AllowDomains: []string{""}}, "hostname"},
		{"inner star", Policy{AllowDomains: []string{"a.*.org"}}, "'*'"},
		{"star in label", Policy{AllowDomains: []string{"*a.org"}}, "'*'"},
		{"double star", Policy{AllowDomains: []string{"*.*.org"}}, "'*'"},
		{"upper case", Policy{AllowDomains: []string{"PyPI.org"}}, "lowercase"},
		{"IPv4", Policy{AllowDomains: []string{"10.99.0.1"}}, "allow_cidrs"},
		{"IPv6", Policy{DenyDomains: []string{"2001:db8::1"}}, "allow_cidrs"},
		{"bracketed IPv6", Policy{DenyDomains: []string{"[::1]"}}, "allow_cidrs"},
		{"numeric last label", Policy{AllowDomains: []string{"1.2.3"}}, "hostname"},
		{"wildcard over an IP", Policy{AllowDomains: []string{"*.10.0.0.1"}}, "allow_cidrs"},
		{"trailing dot", Policy{AllowDomains: []string{"example.org."}}, "hostname"},
		{"empty label", Policy{AllowDomains: []string{"a..org"}}, "hostname"},
		{"leading hyphen", Policy{AllowDomains: []string{"-a.org"}}, "hostname"},
		{"space", Policy{AllowDomains: []string{"a b.org"}}, "hostname"},
		{"escaped byte", Policy{AllowDomains: []string{`a\.b.org`}}, "hostname"},
		{"port", Policy{AllowDomains: []string{"a.org:443"}}, "hostname"},
		{"long label", Policy{AllowDomains: []string{strings.Repeat("a", 64) + ".org"}}, "hostname"},
		{"long name", Policy{AllowDomains: []string{strings.Repeat("abcdefg.", 32) + "org"}}, "hostname"},
		{"unknown preset", Policy{Presets: []string{"cpan"}}, `unknown preset "cpan"`},
		{"too many", Policy{AllowDomains: many}, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Validate(tc.p)
			if tc.bad == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.bad) {
				t.Fatalf("Validate = %v, want ErrInvalid saying %q", err, tc.bad)
			}
		})
	}
}

func TestCompilePresets(t *testing.T) {
	presets := map[string]Policy{
		"a": {AllowDomains: []string{"a.org"}, AllowCIDRs: []string{"192.0.2.0/24"}},
		"b": {AllowDomains: []string{"*.b.org"}, DenyDomains: []string{"x.b.org"}, DenyCIDRs: []string{"192.0.2.9/32"}},
	}
	own := []string{"own.org"}
	p := Policy{AllowDomains: own[:1:1], Presets: []string{"a", "b"}}
	r, err := compile(p, presets)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"own.org", "a.org", "y.b.org"} {
		if !r.nameAllowed(name) {
			t.Errorf("%s not allowed", name)
		}
	}
	for _, name := range []string{"b.org", "x.b.org", "other.org"} {
		if r.nameAllowed(name) {
			t.Errorf("%s allowed", name)
		}
	}
	if len(r.allow) != 1 || len(r.deny) != 1 {
		t.Errorf("CIDRs = %v / %v, want one each", r.allow, r.deny)
	}
	if !slices.Equal(own, []string{"own.org"}) {
		t.Errorf("compile changed the caller's slice: %v", own)
	}
}

func TestDomainMatch(t *testing.T) {
	s, err := parseDomains("allow_domains", []string{"example.org", "*.cdn.net", "*.org.uk"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"example.org", true},
		{"www.example.org", false}, // exact names only
		{"a.cdn.net", true},
		{"a.b.cdn.net", true}, // any depth below
		{"cdn.net", false},    // not the wildcard's own domain
		{"xcdn.net", false},
		{"evil-cdn.net", false},
		{"co.org.uk", true},
		{"", false},
	} {
		if got := s.match(tc.name); got != tc.want {
			t.Errorf("match(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNormalizeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Example.ORG.", "example.org"},
		{"example.org", "example.org"},
		{"10.0.0.1", ""},
		{"::1", ""},
		{`a\.b.org`, ""},
		{"a..org", ""},
		{"", ""},
		{".", ""},
		{"a\x00.org", ""},
	} {
		if got := normalizeName(tc.in); got != tc.want {
			t.Errorf("normalizeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLoadPresets(t *testing.T) {
	// The shipped file is valid and has the presets the docs name.
	presets, err := LoadPresets(filepath.Join("..", "..", "deploy", "network-presets.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"debian", "pypi", "npm", "github", "goproxy"} {
		if len(presets[name].AllowDomains) == 0 {
			t.Errorf("preset %q missing or empty", name)
		}
	}
	if r, err := compile(Policy{Presets: []string{"pypi"}}, presets); err != nil || !r.nameAllowed("files.pythonhosted.org") {
		t.Errorf("the pypi preset does not allow files.pythonhosted.org (%v)", err)
	}

	dir := t.TempDir()
	for _, tc := range []struct{ name, body, bad string }{
		{"ok", `{"x": {"allow_domains": ["x.org"], "allow_cidrs": ["192.0.2.0/24"]}}`, ""},
		{"not JSON", `{`, "unexpected EOF"},
		{"unknown field", `{"x": {"allow_domain": ["x.org"]}}`, "unknown field"},
		{"bad domain", `{"x": {"allow_domains": ["X.org"]}}`, "lowercase"},
		{"nested", `{"x": {"presets": ["y"]}, "y": {}}`, "names other presets"},
		{"bad name", `{"X Y": {}}`, "preset name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadPresets(path)
			if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
				t.Fatalf("LoadPresets = %v, want %q", err, tc.bad)
			}
		})
	}
	if _, err := LoadPresets(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("LoadPresets of a missing file succeeded")
	}
}

func TestNewChecksConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"upstream without port", Config{Upstream: []string{"192.0.2.53"}}},
		{"upstream hostname", Config{Upstream: []string{"dns.example:53"}}},
		{"bad preset", Config{Upstream: []string{"192.0.2.53:53"}, Presets: map[string]Policy{"x": {AllowCIDRs: []string{"nope"}}}}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
}
