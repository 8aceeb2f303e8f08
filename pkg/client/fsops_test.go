package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestFSOpsRoutes(t *testing.T) {
	ctx := context.Background()
	tests := []routeCase{
		{"stat", func(c *Client) error { _, err := c.Stat(ctx, "s1", testToken, "a b/c"); return err },
			"GET", "/v1/sandboxes/s1/stat", "path=a+b%2Fc", ""},
		{"mkdir", func(c *Client) error { _, err := c.MakeDir(ctx, "s1", testToken, "a/b/c", 0); return err },
			"POST", "/v1/sandboxes/s1/mkdir", "", `{"path":"a/b/c"}`},
		{"mkdir with mode", func(c *Client) error { _, err := c.MakeDir(ctx, "s1", testToken, "p", 0o700); return err },
			"POST", "/v1/sandboxes/s1/mkdir", "", `{"path":"p","mode":"0700"}`},
		{"move", func(c *Client) error { _, err := c.Move(ctx, "s1", testToken, "a", "b", false); return err },
			"POST", "/v1/sandboxes/s1/move", "", `{"from":"a","to":"b"}`},
		{"move overwrite", func(c *Client) error { _, err := c.Move(ctx, "s1", testToken, "a", "b", true); return err },
			"POST", "/v1/sandboxes/s1/move", "", `{"from":"a","to":"b","overwrite":true}`},
		{"remove", func(c *Client) error { return c.Remove(ctx, "s1", testToken, "x", false) },
			"DELETE", "/v1/sandboxes/s1/files", "path=x", ""},
		{"remove recursive", func(c *Client) error { return c.Remove(ctx, "s1", testToken, "d", true) },
			"DELETE", "/v1/sandboxes/s1/files", "path=d&recursive=true", ""},
	}
	checkRoutes(t, tests)
}

func TestFSOpsErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":"rename a b: file exists: pass overwrite to replace it","code":"conflict"}`)
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)
	_, err := c.Move(context.Background(), "s1", testToken, "a", "b", false)
	if !errors.Is(err, ErrConflict) {
		t.Errorf("Move = %v, want ErrConflict", err)
	}
	if err := c.Remove(context.Background(), "s1", testToken, "d", false); !errors.Is(err, ErrConflict) {
		t.Errorf("Remove = %v, want ErrConflict", err)
	}
}
