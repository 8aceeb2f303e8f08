package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestRetryAfter(t *testing.T) {
	// The daemon refuses twice with a Retry-After, then answers: the
	// caller sees the answer, and each try carried the whole body.
	var calls atomic.Int32
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"still checking","code":"unavailable"}`)
			return
		}
		io.WriteString(w, `{"stdout":"ok"}`)
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)
	res, err := c.Exec(context.Background(), "s1", testToken, apitype.ExecRequest{Args: []string{"true"}})
	if err != nil || res.Stdout != "ok" {
		t.Fatalf("Exec = %+v, %v; want the answer after two refusals", res, err)
	}
	if len(bodies) != 3 || bodies[0] != bodies[2] || bodies[0] == "" {
		t.Errorf("bodies sent: %q, want the same one three times", bodies)
	}

	// One that says nothing of when is not tried again, and neither is one
	// whose wait would outlast the call's deadline.
	for _, tc := range []struct {
		name, retryAfter string
		timeout          time.Duration
	}{
		{"no Retry-After", "", time.Minute},
		{"past the deadline", "5", time.Second},
	} {
		calls.Store(0)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		_, err := New(srv.URL, testKey, WithTimeout(tc.timeout)).GetSandbox(context.Background(), "s1")
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrUnavailable) || calls.Load() != 1 {
			t.Errorf("%s: %v after %d calls, want one 503", tc.name, err, calls.Load())
		}
	}
}
