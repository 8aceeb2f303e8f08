package main

import (
	"testing"
	"time"
)

func TestFormatters(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {1499 * time.Millisecond, "1s"}, {90 * time.Second, "1m30s"},
		{2*time.Hour + 5*time.Minute, "2h5m"}, {50 * time.Hour, "2d2h"}, {-time.Second, "0s"},
	} {
		if got := fmtDuration(c.d); got != c.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	now := time.Unix(1000, 0)
	if got := fmtUntil(now, 900); got != "expired" {
		t.Errorf("fmtUntil past = %q", got)
	}
	if got := fmtUntil(now, 1060); got != "1m0s" {
		t.Errorf("fmtUntil +60s = %q", got)
	}
	if got := mbPerSec(10e6, 2*time.Second); got != 5 {
		t.Errorf("mbPerSec = %v, want 5", got)
	}
}
