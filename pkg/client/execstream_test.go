package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestExecStream(t *testing.T) {
	tests := []struct {
		name               string
		status             int
		ctype, body        string
		stdout, stderr     string
		want               apitype.ExitStatus
		wantErr            error // matched with errors.Is; nil: none
		wantAnyErr         bool
		wantAccept, method string
	}{
		{name: "chunks and exit", status: 200, ctype: apitype.ContentTypeNDJSON,
			body: `{"stream":"stdout","data":"a"}` + "\n" + `{"stream":"stderr","data":"b"}` + "\n" +
				`{"stream":"stdout","data_b64":"/w=="}` + "\n" + `{"exit":{"exit_code":-1,"signal":"SIGKILL","timed_out":true,"duration_ms":7}}` + "\n",
			stdout: "a\xff", stderr: "b", want: apitype.ExitStatus{ExitCode: -1, Signal: "SIGKILL", TimedOut: true, DurationMs: 7}},
		{name: "server-sent events", status: 200, ctype: apitype.ContentTypeSSE,
			body:   "data: {\"stream\":\"stdout\",\"data\":\"x\"}\n\ndata: {\"exit\":{\"exit_code\":0,\"duration_ms\":1}}\n\n",
			stdout: "x", want: apitype.ExitStatus{DurationMs: 1}},
		{name: "error record", status: 200, ctype: apitype.ContentTypeNDJSON,
			body:   `{"stream":"stdout","data":"a"}` + "\n" + `{"error":{"error":"sandbox died","code":"gone"}}` + "\n",
			stdout: "a", wantErr: ErrGone},
		{name: "cut short", status: 200, ctype: apitype.ContentTypeNDJSON, body: `{"stream":"stdout","data":"a"}` + "\n",
			stdout: "a", wantErr: io.ErrUnexpectedEOF},
		{name: "plain error status", status: 400, ctype: "application/json", body: `{"error":"no such user","code":"bad_request"}`,
			wantErr: ErrBadRequest},
		{name: "an old daemon's buffered answer", status: 200, ctype: "application/json",
			body:   `{"stdout":"o","stderr":"e","exit_code":3,"duration_ms":2}`,
			stdout: "o", stderr: "e", want: apitype.ExitStatus{ExitCode: 3, DurationMs: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes/sb-1/exec" ||
					r.Header.Get("Accept") != apitype.ContentTypeNDJSON || r.Header.Get(apitype.SandboxTokenHeader) != "tok" {
					http.Error(w, "unexpected request", http.StatusTeapot)
					return
				}
				w.Header().Set("Content-Type", tt.ctype)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c := New(srv.URL, "key")
			var stdout, stderr strings.Builder
			got, err := c.ExecStream(context.Background(), "sb-1", "tok", apitype.ExecRequest{Shell: "x"}, &stdout, &stderr)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ExecStream = %v, want %v", err, tt.wantErr)
				}
			} else if err != nil || got != tt.want {
				t.Fatalf("ExecStream = %+v, %v; want %+v", got, err, tt.want)
			}
			if stdout.String() != tt.stdout || stderr.String() != tt.stderr {
				t.Errorf("output = %q, %q; want %q, %q", stdout.String(), stderr.String(), tt.stdout, tt.stderr)
			}
		})
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A writer's error ends the call: the body is closed, which the daemon
// sees as the client gone, and the error is returned.
func TestExecStreamWriterFails(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
		for {
			if _, err := io.WriteString(w, `{"stream":"stdout","data":"tick"}`+"\n"); err != nil {
				close(gone)
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	defer srv.Close()
	_, err := New(srv.URL, "key").ExecStream(context.Background(), "sb-1", "", apitype.ExecRequest{Shell: "x"}, failWriter{}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("ExecStream = %v, want the writer's error", err)
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server kept streaming after the client gave up")
	}
}
