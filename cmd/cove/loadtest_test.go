package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/fakedaemon"
	"github.com/cove-sandbox/cove/internal/loadtest"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func TestLoadtestCmd(t *testing.T) {
	f := fakedaemon.New()
	srv := httptest.NewServer(f)
	defer srv.Close()
	if _, err := client.New(srv.URL, "key").CreateSnapshot(context.Background(), apitype.CreateSnapshotRequest{Tag: "default"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COVE_API_KEY", "key")
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error; "" for success
	}{
		{"json", []string{"loadtest", "--url", srv.URL, "-c", "3", "-n", "60", "-d", "0", "--json"}, ""},
		{"table", []string{"loadtest", "--url", srv.URL, "-n", "20"}, ""},
		{"remote", []string{"loadtest", "--url", "http://192.0.2.1:8080", "-n", "1"}, "loopback"},
		{"bad mix", []string{"loadtest", "--url", srv.URL, "--mix", "exec=1"}, "create or spawn"},
		{"unknown op", []string{"loadtest", "--url", srv.URL, "--mix", "eval=1"}, "unknown op"},
		{"no bound", []string{"loadtest", "--url", srv.URL, "-d", "0"}, "bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, tc.args...)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("err = %v, want one naming %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadtest: %v\n%s", err, out)
			}
			if tc.name == "json" {
				var rep loadtest.Report
				if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.TotalOps != 60 || rep.Errors != 0 {
					t.Errorf("report %+v, %v: want 60 ops, no errors", rep, err)
				}
			} else if !strings.Contains(out, "ops/s") {
				t.Errorf("no table: %s", out)
			}
		})
	}
	if left := f.Sandboxes(); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}
