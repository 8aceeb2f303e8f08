package sandbox

import (
	"errors"
	"fmt"
)

// Sentinel errors. The API maps them onto statuses; messages wrapped around
// them say what went wrong and what to do.
var (
	ErrNotFound    = errors.New("not found")
	ErrInvalid     = errors.New("invalid request")
	ErrForbidden   = errors.New("forbidden")
	ErrLimit       = errors.New("limit reached")
	ErrUnavailable = errors.New("unavailable")
	ErrTimeout     = errors.New("timed out")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ErrConflict reports a request that clashes with existing state: a tag
// already taken, a snapshot still in use.
var ErrConflict = errors.New("conflict")
