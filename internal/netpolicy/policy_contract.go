// Package netpolicy enforces sandboxes' egress policies.
//
// This file holds only the contract's types, so that the packages using
// them compile before the package itself lands; the real package replaces it.
package netpolicy

import (
	"errors"
)

// Policy is a sandbox's egress policy as the user gives it; the zero Policy denies everything.
type Policy struct {
	AllowCIDRs   []string `json:"allow_cidrs,omitempty"`
	DenyCIDRs    []string `json:"deny_cidrs,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"` // "example.org", "*.example.org"
	DenyDomains  []string `json:"deny_domains,omitempty"`
	Presets      []string `json:"presets,omitempty"` // names from Config.Presets, expanded when applied
}

// IsZero reports whether p allows nothing and names nothing.
func (p Policy) IsZero() bool {
	return len(p.AllowCIDRs) == 0 && len(p.DenyCIDRs) == 0 && len(p.AllowDomains) == 0 &&
		len(p.DenyDomains) == 0 && len(p.Presets) == 0
}

var (
	// ErrInvalid is wrapped with what is wrong.
	ErrInvalid = errors.New("invalid network policy")
	// ErrNotAttached is returned for a sandbox without a network.
	ErrNotAttached = errors.New("sandbox has no network attached")
)
