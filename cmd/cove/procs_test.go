package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// startProcFake serves canned answers for a sandbox sb1's process routes
// and records what each request sent.
func startProcFake(t *testing.T) *[]string {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(body))
		w.Header().Set("Content-Type", "application/json")
		p := "/v1/sandboxes/sb1"
		switch {
		case r.URL.Path == p+"/exec":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"pid":42,"tag":"web","cmd":["sleep","9"],"status":"running","output_size":0,"stdin_open":true,"cove":true}`)
		case r.URL.Path == p+"/processes":
			io.WriteString(w, `{"processes":[{"pid":42,"tag":"web","cmd":["sleep","9"],"user":"root","status":"exited","exit":{"exit_code":-1,"signal":"SIGTERM","duration_ms":5},"output_size":12,"stdin_open":false,"cove":true}]}`)
		case r.URL.Path == p+"/processes/web/output" && r.URL.Query().Get("follow") == "true":
			w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
			io.WriteString(w, "{\"stream\":\"stdout\",\"data\":\"out\\n\"}\n{\"stream\":\"stderr\",\"offset\":4,\"data\":\"err\\n\"}\n{\"offset\":8,\"exit\":{\"exit_code\":3,\"duration_ms\":1}}\n")
		case r.URL.Path == p+"/processes/web/output" && r.URL.Query().Get("offset") == "0":
			io.WriteString(w, `{"chunks":[{"stream":"stdout","data":"abc"}],"offset":0,"next_offset":3}`)
		case r.URL.Path == p+"/processes/web/output":
			io.WriteString(w, `{"chunks":[],"offset":3,"next_offset":3}`)
		case r.URL.Path == p+"/processes/gone/signal":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":"cannot signal it: process 7 has exited (exit code 0)","code":"conflict"}`)
		default:
			io.WriteString(w, `{"pid":42,"cmd":["x"],"status":"running","output_size":0,"stdin_open":true,"cove":true}`)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_API_KEY", "key")
	t.Setenv("COVE_SANDBOX_TOKEN", "tok")
	return &seen
}

func TestProcCLI(t *testing.T) {
	seen := startProcFake(t)
	tests := []struct {
		args    []string
		want    string // in stdout
		sent    string // in the last request
		wantErr error
	}{
		{[]string{"exec", "--background", "--tag", "web", "sb1", "--", "sleep", "9"}, "42 web\n", `"background":true,"tag":"web"`, nil},
		{[]string{"ps", "sb1"}, "exited SIGTERM", "GET /v1/sandboxes/sb1/processes? ", nil},
		{[]string{"ps", "--all", "--json", "sb1"}, `"signal": "SIGTERM"`, "all=true", nil},
		{[]string{"logs", "sb1", "web"}, "abc", "offset=3", nil},
		{[]string{"logs", "-f", "sb1", "web"}, "out\n", "follow=true", exitError{3}},
		{[]string{"kill-proc", "sb1", "web"}, "", `{"signal":"TERM"}`, nil},
		{[]string{"kill-proc", "sb1", "web", "KILL"}, "", `{"signal":"KILL"}`, nil},
		{[]string{"kill-proc", "sb1", "gone"}, "", "", errors.New("has exited")},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := runCLI(t, tc.args...)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatal(err)
			case tc.wantErr != nil && (err == nil || !errors.Is(err, tc.wantErr) && !strings.Contains(err.Error(), tc.wantErr.Error())):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("stdout %q, want %q in it", out, tc.want)
			}
			if last := (*seen)[len(*seen)-1]; !strings.Contains(last, tc.sent) {
				t.Errorf("sent %q, want %q in it", last, tc.sent)
			}
		})
	}
}
