package netpolicy

import "errors"

// Policy is a sandbox's egress policy as the user gives it; the zero Policy denies everything.
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

// ErrInvalid is wrapped with what is wrong.
var ErrInvalid = errors.New("invalid network policy")
