package netpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Policy is a sandbox's egress policy as the user gives it; the zero Policy
// denies everything.
//
// A domain pattern is a lowercase hostname ("example.org", that name only)
// or "*." and a hostname ("*.example.org": every name below it, at any
// depth, but not example.org itself). A CIDR is IPv4 or IPv6 ("a.b.c.d" alone
// means that address); a sandbox has no IPv6 path, so IPv6 entries are
// accepted but never admit anything.
type Policy struct {
	AllowCIDRs   []string `json:"allow_cidrs,omitempty"`
	DenyCIDRs    []string `json:"deny_cidrs,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"` // "example.org", "*.example.org"
	DenyDomains  []string `json:"deny_domains,omitempty"`
	Presets      []string `json:"presets,omitempty"` // names from Config.Presets, expanded when applied
}

// IsZero reports whether p is the deny-all policy.
func (p Policy) IsZero() bool {
	return len(p.AllowCIDRs) == 0 && len(p.DenyCIDRs) == 0 && len(p.AllowDomains) == 0 &&
		len(p.DenyDomains) == 0 && len(p.Presets) == 0
}

var (
	// ErrInvalid is wrapped with what is wrong.
	ErrInvalid = errors.New("invalid network policy")
	// ErrNotAttached is returned by Update for a sandbox that has no network.
	ErrNotAttached = errors.New("sandbox has no network attached")
)

// maxEntries bounds each list of a policy: matching a name costs the same
// whatever the lists' length, but a CIDR is matched against each entry.
const maxEntries = 1024

// LoadPresets reads a JSON object of named policies, such as
// {"pypi": {"allow_domains": ["pypi.org", "files.pythonhosted.org"]}}.
// A preset may not name other presets.
func LoadPresets(path string) (map[string]Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("network presets: %w", err)
	}
	var presets map[string]Policy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&presets); err != nil {
		return nil, fmt.Errorf("network presets %s: %w", path, err)
	}
	if err := checkPresets(presets); err != nil {
		return nil, fmt.Errorf("network presets %s: %w", path, err)
	}
	return presets, nil
}

// checkPresets validates each preset on its own.
func checkPresets(presets map[string]Policy) error {
	for name, p := range presets {
		if !validPresetName(name) {
			return fmt.Errorf("%w: preset name %q: want lowercase letters, digits, '-' or '_'", ErrInvalid, name)
		}
		if len(p.Presets) > 0 {
			return fmt.Errorf("%w: preset %q names other presets", ErrInvalid, name)
		}
		if _, err := compile(p, nil); err != nil {
			return fmt.Errorf("preset %q: %w", name, err)
		}
	}
	return nil
}

func validPresetName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// rules is a Policy with its presets expanded, compiled for matching.
type rules struct {
	allow, deny  []netip.Prefix
	allowDomains domainSet
	denyDomains  domainSet
}

// compile validates p and expands its presets; every error wraps ErrInvalid.
func compile(p Policy, presets map[string]Policy) (*rules, error) {
	for _, l := range []struct {
		name string
		list []string
	}{
		{"allow_cidrs", p.AllowCIDRs}, {"deny_cidrs", p.DenyCIDRs},
		{"allow_domains", p.AllowDomains}, {"deny_domains", p.DenyDomains}, {"presets", p.Presets},
	} {
		if len(l.list) > maxEntries {
			return nil, fmt.Errorf("%w: %s has %d entries, at most %d", ErrInvalid, l.name, len(l.list), maxEntries)
		}
	}
	all := p
	for _, name := range p.Presets {
		pre, ok := presets[name]
		if !ok {
			return nil, fmt.Errorf("%w: unknown preset %q", ErrInvalid, name)
		}
		all.AllowCIDRs = append(slices.Clip(all.AllowCIDRs), pre.AllowCIDRs...)
		all.DenyCIDRs = append(slices.Clip(all.DenyCIDRs), pre.DenyCIDRs...)
		all.AllowDomains = append(slices.Clip(all.AllowDomains), pre.AllowDomains...)
		all.DenyDomains = append(slices.Clip(all.DenyDomains), pre.DenyDomains...)
	}
	r := &rules{}
	var err error
	if r.allow, err = parsePrefixes("allow_cidrs", all.AllowCIDRs); err != nil {
		return nil, err
	}
	if r.deny, err = parsePrefixes("deny_cidrs", all.DenyCIDRs); err != nil {
		return nil, err
	}
	if r.allowDomains, err = parseDomains("allow_domains", all.AllowDomains); err != nil {
		return nil, err
	}
	if r.denyDomains, err = parseDomains("deny_domains", all.DenyDomains); err != nil {
		return nil, err
	}
	return r, nil
}

func parsePrefixes(field string, list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%w: %s: %q is not a CIDR (%v)", ErrInvalid, field, s, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("%w: %s: %q: write an IPv4 range in IPv4 form", ErrInvalid, field, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func parseDomains(field string, list []string) (domainSet, error) {
	s := domainSet{exact: map[string]bool{}, below: map[string]bool{}}
	for _, d := range list {
		if err := checkPattern(d); err != nil {
			return domainSet{}, fmt.Errorf("%w: %s: %q: %v", ErrInvalid, field, d, err)
		}
		if rest, ok := strings.CutPrefix(d, "*."); ok {
			s.below[rest] = true
		} else {
			s.exact[d] = true
		}
	}
	return s, nil
}

// checkPattern says what is wrong with a domain pattern, if anything.
func checkPattern(d string) error {
	host := strings.TrimPrefix(d, "*.")
	switch {
	case d == "*" || d == "":
		return errors.New("want a hostname or *.hostname")
	case strings.Contains(host, "*"):
		return errors.New("'*' is allowed only as a whole first label, as in *.example.org")
	case strings.ToLower(host) != host:
		return errors.New("must be lowercase")
	case strings.HasPrefix(host, "[") || isIP(host):
		return errors.New("an IP address is not a domain: use allow_cidrs")
	case !validHostname(host):
		return errors.New("not a hostname")
	}
	return nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// validHostname reports whether s is a lowercase hostname without a
// trailing dot: labels of letters, digits, '-' and '_', and a last label
// that is not all digits (which would read as an IPv4 address).
func validHostname(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

// normalizeName turns a name a client gave (a DNS question, a Host header
// without its port, an SNI) into the form patterns are matched against, or
// "" if it is no hostname: an IP literal, escaped bytes, an empty label.
func normalizeName(s string) string {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if !validHostname(s) {
		return ""
	}
	return s
}

// domainSet matches names against exact names and "*." patterns.
type domainSet struct {
	exact map[string]bool
	below map[string]bool // "example.org" for "*.example.org"
}

// match reports whether the normalized name matches: exactly, or as a name
// below a "*." pattern's domain.
func (s domainSet) match(name string) bool {
	if name == "" {
		return false
	}
	if s.exact[name] {
		return true
	}
	for i := range len(name) {
		if name[i] == '.' && s.below[name[i+1:]] {
			return true
		}
	}
	return false
}

// nameAllowed is the resolver's rule: allowed by allow_domains and not
// denied by deny_domains.
func (r *rules) nameAllowed(name string) bool {
	return r.allowDomains.match(name) && !r.denyDomains.match(name)
}
