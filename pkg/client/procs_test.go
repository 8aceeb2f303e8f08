package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestProcessRoutes(t *testing.T) {
	ctx := context.Background()
	tests := []routeCase{
		{"start", func(c *Client) error {
			_, err := c.StartProcess(ctx, "s1", testToken, apitype.ExecRequest{Args: []string{"sleep", "9"}, Tag: "t"})
			return err
		}, "POST", "/v1/sandboxes/s1/exec", "", `{"args":["sleep","9"],"background":true,"tag":"t"}`},
		{"list", func(c *Client) error { _, err := c.Processes(ctx, "s1", testToken, true); return err },
			"GET", "/v1/sandboxes/s1/processes", "all=true", ""},
		{"get by tag", func(c *Client) error { _, err := c.Process(ctx, "s1", testToken, "web srv"); return err },
			"GET", "/v1/sandboxes/s1/processes/web%20srv", "", ""},
		{"poll", func(c *Client) error { _, err := c.ProcessOutput(ctx, "s1", testToken, "12", 5, 100); return err },
			"GET", "/v1/sandboxes/s1/processes/12/output", "limit=100&offset=5", ""},
		{"stdin", func(c *Client) error {
			_, err := c.WriteStdin(ctx, "s1", testToken, "12", strings.NewReader("abc"), true)
			return err
		}, "POST", "/v1/sandboxes/s1/processes/12/stdin", "close=true", "abc"},
		{"remove", func(c *Client) error { return c.RemoveProcess(ctx, "s1", testToken, "web") },
			"DELETE", "/v1/sandboxes/s1/processes/web", "", ""},
		{"signal", func(c *Client) error { _, err := c.Signal(ctx, "s1", testToken, "12", "KILL"); return err },
			"POST", "/v1/sandboxes/s1/processes/12/signal", "", `{"signal":"KILL"}`},
	}
	checkRoutes(t, tests)
}

// routeCase is a client call and the request it must send.
type routeCase = struct {
	name                string
	call                func(c *Client) error
	method, path, query string
	body                string
}

// checkRoutes makes each call against a fake daemon and checks what it
// sent.
func checkRoutes(t *testing.T, tests []routeCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rec := fakeDaemon(t)
			if err := tt.call(c); err != nil {
				t.Fatal(err)
			}
			if rec.method != tt.method || rec.path != tt.path || rec.rawQuery != tt.query || string(rec.body) != tt.body {
				t.Errorf("sent %s %s?%s %s; want %s %s?%s %s", rec.method, rec.path, rec.rawQuery, rec.body, tt.method, tt.path, tt.query, tt.body)
			}
			if rec.token != testToken || rec.auth != "Bearer "+testKey {
				t.Errorf("token %q auth %q", rec.token, rec.auth)
			}
		})
	}
}

func TestFollowOutput(t *testing.T) {
	tests := []struct {
		name, status, body string
		want               string
		wantErr            error
	}{
		{"to the exit", "200", "{\"stream\":\"stdout\",\"data\":\"a\"}\n{\"stream\":\"stderr\",\"offset\":1,\"data_b64\":\"/w==\"}\n{\"offset\":2,\"exit\":{\"exit_code\":0,\"duration_ms\":1}}\n",
			"stdout:a stderr:\xff exit", nil},
		{"error mid-stream", "200", "{\"stream\":\"stdout\",\"data\":\"a\"}\n{\"error\":{\"error\":\"gone\",\"code\":\"unavailable\"}}\n", "stdout:a", ErrUnavailable},
		{"cut short", "200", "{\"stream\":\"stdout\",\"data\":\"a\"}\n", "stdout:a", io.ErrUnexpectedEOF},
		{"unknown", "404", `{"error":"no background process with pid 5","code":"not_found"}`, "", ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("follow") != "true" || r.Header.Get("Accept") != apitype.ContentTypeNDJSON {
					t.Errorf("request %s, Accept %q", r.URL, r.Header.Get("Accept"))
				}
				if tt.status == "404" {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusNotFound)
				} else {
					w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
				}
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c := New(srv.URL, testKey)
			var got []string
			err := c.FollowOutput(context.Background(), "s1", testToken, "5", 0, func(ev apitype.OutputEvent) error {
				if ev.Exit != nil {
					got = append(got, "exit")
				} else {
					got = append(got, ev.Stream+":"+string(ev.Bytes()))
				}
				return nil
			})
			if strings.Join(got, " ") != tt.want || (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("got %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
