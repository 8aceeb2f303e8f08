package sandbox

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. The API maps them onto statuses; messages wrapped around
// them say what went wrong and what to do, in the service's own terms: how
// to reach a sandbox over HTTP is the API's to say.
var (
	ErrNotFound    = errors.New("not found")
	ErrInvalid     = errors.New("invalid request")
	ErrForbidden   = errors.New("forbidden")
	ErrLimit       = errors.New("limit reached")
	ErrUnavailable = errors.New("unavailable")
	ErrTimeout     = errors.New("timed out")
	// ErrConflict reports a request that clashes with existing state: a
	// tag already taken, a snapshot still in use.
	ErrConflict = errors.New("conflict")
	// ErrDead reports a call to a sandbox that died: its runtime process
	// ended while it ran. The message says why and when.
	ErrDead = errors.New("dead")
	// ErrTooLarge reports a request over a size limit, such as an exec's
	// stdin.
	ErrTooLarge = errors.New("too large")
	// ErrNoSpace reports a save (snapshot, branch, checkpoint, pause,
	// template step) refused because the disk it goes to is full; nothing
	// of it is kept.
	ErrNoSpace = errors.New("insufficient storage")
	// ErrQuota reports a request refused because it would take its
	// tenant past one of its quotas (quota.go); nothing of it is made.
	ErrQuota = errors.New("quota exceeded")
)

// Refinements of the sentinels above, for the cases where a front end adds
// its own words: where to list what exists, where a token goes. A message
// built on one of them ends where such words can follow.
var (
	// ErrNoSandbox is ErrNotFound for a sandbox id that names no live
	// sandbox.
	ErrNoSandbox = fmt.Errorf("%w", ErrNotFound)
	// ErrNoSnapshot is ErrNotFound for a tag that names no snapshot.
	ErrNoSnapshot = fmt.Errorf("%w", ErrNotFound)
	// ErrNoToken is ErrForbidden for a data-plane call without the
	// sandbox's token.
	ErrNoToken = fmt.Errorf("%w", ErrForbidden)
	// ErrPaused is ErrConflict for a call to a paused sandbox (without
	// auto_resume): resume it first.
	ErrPaused = fmt.Errorf("%w", ErrConflict)
	// ErrRetry is ErrUnavailable for a call refused, changing nothing,
	// because what it needs is still being made ready (a sandbox checked
	// after a restart, a snapshot being built): the same call will do
	// after RetryAfter.
	ErrRetry = fmt.Errorf("%w", ErrUnavailable)
)

// RetryAfter is how soon a call refused with ErrRetry may be tried again.
const RetryAfter = time.Second

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
