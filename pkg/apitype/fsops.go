package apitype

import (
	"fmt"
	"strconv"
)

// MkdirRequest is the body of POST /v1/sandboxes/{id}/mkdir: the directory
// and its missing parents are made; one that exists already is fine.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"` // octal permission bits, e.g. "0700"; default "0755"
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/move. An existing
// target is a 409 unless Overwrite.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// ParseMode reads permission bits written as the API writes them, an octal
// string such as "0755"; "" is 0, which the daemon takes as the default.
func ParseMode(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %.40q is not an octal permission mode such as 0644 or 0755", s)
	}
	return uint32(m), nil
}
