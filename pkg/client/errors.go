package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Error is a non-2xx answer from the daemon.
type Error struct {
	Status  int    // HTTP status code
	Code    string // apitype.Code*, or "" if the body had none
	Message string // the daemon's explanation, or the status text
	// RetryAfter is the daemon's Retry-After: it did not carry the call
	// out, and the same call may succeed after that long. 0: none.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, http.StatusText(e.Status))
}

// Is reports whether target is an *Error with the same status or the same
// non-empty code, so that errors.Is(err, ErrNotFound) holds for a 404 from
// a proxy that sent no code as well as for the daemon's own "not_found".
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return (t.Status != 0 && t.Status == e.Status) || (t.Code != "" && t.Code == e.Code)
}

// Sentinels for errors.Is. They are templates, compared by status or code,
// and never returned themselves: ErrTimeout, for one, matches the daemon's
// 504 "timeout" as well as a 408.
var (
	ErrBadRequest   = &Error{Status: http.StatusBadRequest, Code: apitype.CodeBadRequest, Message: "bad request"}
	ErrUnauthorized = &Error{Status: http.StatusUnauthorized, Code: apitype.CodeUnauthorized, Message: "unauthorized"}
	ErrForbidden    = &Error{Status: http.StatusForbidden, Code: apitype.CodeForbidden, Message: "forbidden"}
	ErrNotFound     = &Error{Status: http.StatusNotFound, Code: apitype.CodeNotFound, Message: "not found"}
	ErrConflict     = &Error{Status: http.StatusConflict, Code: apitype.CodeConflict, Message: "conflict"}
	ErrTooLarge     = &Error{Status: http.StatusRequestEntityTooLarge, Code: apitype.CodeTooLarge, Message: "too large"}
	ErrLimit        = &Error{Status: http.StatusTooManyRequests, Code: apitype.CodeLimit, Message: "limit reached"}
	ErrTimeout      = &Error{Status: http.StatusRequestTimeout, Code: apitype.CodeTimeout, Message: "timeout"}
	ErrUnavailable  = &Error{Status: http.StatusServiceUnavailable, Code: apitype.CodeUnavailable, Message: "unavailable"}
	// ErrGone is a call to a dead sandbox; GetSandbox says why it died.
	ErrGone = &Error{Status: http.StatusGone, Code: apitype.CodeGone, Message: "gone"}
	// ErrBadGateway is a tunnel to a port nothing in the sandbox listens on.
	ErrBadGateway = &Error{Status: http.StatusBadGateway, Code: apitype.CodeBadGateway, Message: "bad gateway"}
	// ErrNoSpace is a save refused because the daemon's disk is full.
	ErrNoSpace = &Error{Status: http.StatusInsufficientStorage, Code: apitype.CodeNoSpace, Message: "insufficient storage"}
	// ErrQuota is a call refused by its key's tenant's quota (a 429, so
	// ErrLimit matches it too); matched by its code alone.
	ErrQuota = &Error{Code: apitype.CodeQuota, Message: "quota exceeded"}
)

// sentinels are the errors above, by the codes they stand for.
var sentinels = []*Error{ErrBadRequest, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrConflict,
	ErrTooLarge, ErrLimit, ErrTimeout, ErrUnavailable, ErrGone, ErrBadGateway, ErrNoSpace}

// maxErrorBody bounds how much of an error body is read: enough for any
// JSON error, little enough that a proxy's HTML page is harmless.
const maxErrorBody = 16 << 10

// errorFrom builds an *Error from a non-2xx response, whose body may be
// the daemon's JSON ErrorBody or anything else, such as a proxy's page.
func errorFrom(resp *http.Response) *Error {
	e := &Error{Status: resp.StatusCode}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body apitype.ErrorBody
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.Code, e.Message = body.Code, body.Error
		return e
	}
	e.Message = summarize(raw)
	if e.Message == "" {
		e.Message = strings.ToLower(http.StatusText(resp.StatusCode))
		if e.Message == "" {
			e.Message = "unexpected status"
		}
	}
	return e
}

// summarize returns the first line of a non-JSON body, shortened, or ""
// if it doesn't look like text.
func summarize(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	const maxLen = 200
	if len(s) > maxLen {
		s = s[:maxLen] + "..."
	}
	s = strings.ToValidUTF8(s, "")
	if strings.HasPrefix(s, "<") || strings.ContainsRune(s, 0) { // HTML or binary
		return ""
	}
	return s
}
