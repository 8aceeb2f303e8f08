package main

import (
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestShellExitCode(t *testing.T) {
	for _, tc := range []struct {
		st   apitype.ExitStatus
		want int
	}{
		{apitype.ExitStatus{ExitCode: 0}, 0},
		{apitype.ExitStatus{ExitCode: 3}, 3},
		{apitype.ExitStatus{ExitCode: -1, Signal: "SIGKILL"}, 137},
		{apitype.ExitStatus{ExitCode: -1, Signal: "SIGHUP"}, 129},
		{apitype.ExitStatus{ExitCode: -1, Signal: "SIGBOGUS"}, 255},
		{apitype.ExitStatus{ExitCode: 300}, 255},
	} {
		if got := shellExitCode(tc.st); got != tc.want {
			t.Errorf("shellExitCode(%+v) = %d, want %d", tc.st, got, tc.want)
		}
	}
}
