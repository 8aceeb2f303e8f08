package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

const (
	testKey   = "api-key-1"
	testToken = "sb-token-1"
)

// recorded is what the fake daemon saw of one request.
type recorded struct {
	method, path, rawQuery string
	auth, token            string
	body                   []byte
}

// fakeDaemon answers every route with a minimal success body and records
// the last request.
func fakeDaemon(t *testing.T) (*Client, *recorded) {
	t.Helper()
	rec := new(recorded)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		*rec = recorded{
			method:   r.Method,
			path:     r.URL.EscapedPath(),
			rawQuery: r.URL.RawQuery,
			auth:     r.Header.Get("Authorization"),
			token:    r.Header.Get(apitype.SandboxTokenHeader),
			body:     body,
		}
		switch {
		case r.URL.Path == "/healthz":
			io.WriteString(w, `{"ok":true}`)
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/v1/sandboxes" && r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `[{"id":"s1","token":"t1"}]`)
		case r.URL.Path == "/v1/sandboxes", r.URL.Path == "/v1/snapshots" && r.Method == http.MethodGet:
			io.WriteString(w, `[]`)
		case r.URL.Path == "/v1/snapshots" && r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"tag":"py","depth":0,"pool_size":3}`)
		case strings.HasSuffix(r.URL.Path, "/ports") && r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"port":8000,"public":true,"url":"http://8000-s1.localhost:8080","token":"pt"}`)
		case strings.HasSuffix(r.URL.Path, "/ports"):
			io.WriteString(w, `{"ports":[{"port":8000,"public":false,"url":"http://8000-s1.localhost:8080","token":"pt"}]}`)
		case strings.HasSuffix(r.URL.Path, "/branch") || strings.HasSuffix(r.URL.Path, "/snapshot"):
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"tag":"b1","branched_from":"s1","depth":1,"pause_ms":12.5,"children":[{"id":"c1","token":"ct1"}]}`)
		default:
			io.WriteString(w, `{}`)
		}
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", testKey), rec
}

func TestRoutesAndHeaders(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		call       func(c *Client) error
		method     string
		path       string
		query      string // raw query wanted, if any
		wantAuth   bool
		wantToken  bool
		bodyPrefix string
	}{
		{"health", func(c *Client) error { return c.Health(ctx) }, "GET", "/healthz", "", false, false, ""},
		{"version", func(c *Client) error { _, err := c.Version(ctx); return err }, "GET", "/version", "", true, false, ""},
		{"info", func(c *Client) error { _, err := c.Info(ctx); return err }, "GET", "/v1/info", "", true, false, ""},
		{"create", func(c *Client) error {
			sbs, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 2, TTLSecs: 60})
			if err == nil && (len(sbs) != 1 || sbs[0].Token != "t1") {
				t.Errorf("create = %+v", sbs)
			}
			return err
		}, "POST", "/v1/sandboxes", "", true, false, `{"n":2,"ttl_secs":60}`},
		{"list", func(c *Client) error { _, err := c.ListSandboxes(ctx); return err }, "GET", "/v1/sandboxes", "", true, false, ""},
		{"get", func(c *Client) error { _, err := c.GetSandbox(ctx, "s1"); return err }, "GET", "/v1/sandboxes/s1", "", true, false, ""},
		{"delete", func(c *Client) error { return c.DeleteSandbox(ctx, "s1") }, "DELETE", "/v1/sandboxes/s1", "", true, false, ""},
		{"extend", func(c *Client) error { _, err := c.Extend(ctx, "s1", 300); return err }, "POST", "/v1/sandboxes/s1/extend", "", true, false, `{"ttl_secs":300}`},
		{"ping", func(c *Client) error { _, err := c.Ping(ctx, "s1", testToken); return err }, "POST", "/v1/sandboxes/s1/ping", "", true, true, ""},
		{"exec", func(c *Client) error {
			_, err := c.Exec(ctx, "s1", testToken, apitype.ExecRequest{Args: []string{"true"}})
			return err
		}, "POST", "/v1/sandboxes/s1/exec", "", true, true, `{"args":["true"]}`},
		{"eval", func(c *Client) error {
			_, err := c.Eval(ctx, "s1", testToken, apitype.EvalRequest{Code: "1+1"})
			return err
		}, "POST", "/v1/sandboxes/s1/eval", "", true, true, `{"code":"1+1"}`},
		{"wait", func(c *Client) error {
			_, err := c.Wait(ctx, "s1", testToken, apitype.WaitRequest{Path: "log", Text: "ready"})
			return err
		}, "POST", "/v1/sandboxes/s1/wait", "", true, true, `{"path":"log","text":"ready"}`},
		{"list files", func(c *Client) error {
			_, err := c.ListFiles(ctx, "s1", testToken, "a dir/x&y", 2)
			return err
		}, "GET", "/v1/sandboxes/s1/list", "depth=2&path=a+dir%2Fx%26y", true, true, ""},
		{"put file", func(c *Client) error {
			_, err := c.PutFile(ctx, "s1", testToken, "my file #1.txt", 0o755, strings.NewReader("hi"), 2)
			return err
		}, "PUT", "/v1/sandboxes/s1/files", "mode=0755&path=my+file+%231.txt", true, true, "hi"},
		{"get file", func(c *Client) error {
			rc, _, err := c.GetFile(ctx, "s1", testToken, "sub dir/f?.txt")
			if err == nil {
				rc.Close()
			}
			return err
		}, "GET", "/v1/sandboxes/s1/files", "path=sub+dir%2Ff%3F.txt", true, true, ""},
		{"create snapshot", func(c *Client) error {
			zero := 0
			si, err := c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "py", Warm: "true", PoolSize: &zero})
			if err == nil && (si.Tag != "py" || si.PoolSize != 3) {
				t.Errorf("create snapshot = %+v", si)
			}
			return err
		}, "POST", "/v1/snapshots", "", true, false, `{"tag":"py","warm":"true","pool_size":0}`},
		{"list snapshots", func(c *Client) error {
			sis, err := c.ListSnapshots(ctx)
			if err == nil && sis == nil {
				t.Error("list snapshots = nil, want empty")
			}
			return err
		}, "GET", "/v1/snapshots", "", true, false, ""},
		{"get snapshot", func(c *Client) error { _, err := c.GetSnapshot(ctx, "py"); return err }, "GET", "/v1/snapshots/py", "", true, false, ""},
		{"escaped tag", func(c *Client) error { _, err := c.GetSnapshot(ctx, "a/b c"); return err }, "GET", "/v1/snapshots/a%2Fb%20c", "", true, false, ""},
		{"delete snapshot", func(c *Client) error { return c.DeleteSnapshot(ctx, "py") }, "DELETE", "/v1/snapshots/py", "", true, false, ""},
		{"branch", func(c *Client) error {
			br, err := c.Branch(ctx, "s1", testToken, apitype.BranchRequest{N: 2})
			if err == nil && (br.Tag != "b1" || br.BranchedFrom != "s1" || br.PauseMs != 12.5 ||
				len(br.Children) != 1 || br.Children[0].Token != "ct1") {
				t.Errorf("branch = %+v", br)
			}
			return err
		}, "POST", "/v1/sandboxes/s1/branch", "", true, true, `{"n":2}`},
		{"snapshot sandbox", func(c *Client) error {
			br, err := c.SnapshotSandbox(ctx, "s1", testToken, apitype.BranchRequest{Tag: "mine"})
			if err == nil && br.Tag != "b1" {
				t.Errorf("snapshot sandbox = %+v", br)
			}
			return err
		}, "POST", "/v1/sandboxes/s1/snapshot", "", true, true, `{"tag":"mine"}`},
		{"spawn from a sandbox's snapshot", func(c *Client) error {
			_, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "b1", SandboxToken: testToken})
			return err
		}, "POST", "/v1/sandboxes", "", true, true, `{"snapshot_tag":"b1"}`},
		{"escaped id", func(c *Client) error { _, err := c.GetSandbox(ctx, "a/b c"); return err }, "GET", "/v1/sandboxes/a%2Fb%20c", "", true, false, ""},
		{"create with a policy", func(c *Client) error {
			_, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{Network: &apitype.NetworkPolicy{AllowDomains: []string{"pypi.org"}}})
			return err
		}, "POST", "/v1/sandboxes", "", true, false, `{"network":{"allow_domains":["pypi.org"]}}`},
		{"branch with a policy", func(c *Client) error {
			_, err := c.Branch(ctx, "s1", testToken, apitype.BranchRequest{Network: &apitype.NetworkPolicy{}})
			return err
		}, "POST", "/v1/sandboxes/s1/branch", "", true, true, `{"network":{}}`},
		{"set network", func(c *Client) error {
			_, err := c.SetNetwork(ctx, "s1", apitype.NetworkPolicy{AllowCIDRs: []string{"192.0.2.0/24"}, Presets: []string{"pypi"}})
			return err
		}, "PUT", "/v1/sandboxes/s1/network", "", true, false, `{"allow_cidrs":["192.0.2.0/24"],"presets":["pypi"]}`},
		{"deny all", func(c *Client) error { _, err := c.SetNetwork(ctx, "s1", apitype.NetworkPolicy{}); return err },
			"PUT", "/v1/sandboxes/s1/network", "", true, false, `{}`},
		{"expose", func(c *Client) error {
			p, err := c.ExposePort(ctx, "s1", testToken, 8000, true)
			if err == nil && (p.Port != 8000 || p.Token != "pt") {
				t.Errorf("expose = %+v", p)
			}
			return err
		}, "POST", "/v1/sandboxes/s1/ports", "", true, true, `{"port":8000,"public":true}`},
		{"list ports", func(c *Client) error {
			ps, err := c.ListPorts(ctx, "s1", testToken)
			if err == nil && (len(ps) != 1 || ps[0].Port != 8000) {
				t.Errorf("ports = %+v", ps)
			}
			return err
		}, "GET", "/v1/sandboxes/s1/ports", "", true, true, ""},
		{"unexpose", func(c *Client) error { return c.UnexposePort(ctx, "s1", testToken, 8000) }, "DELETE", "/v1/sandboxes/s1/ports/8000", "", true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rec := fakeDaemon(t)
			if err := tt.call(c); err != nil {
				t.Fatalf("call: %v", err)
			}
			if rec.method != tt.method || rec.path != tt.path {
				t.Errorf("got %s %s, want %s %s", rec.method, rec.path, tt.method, tt.path)
			}
			if tt.query != "" && rec.rawQuery != tt.query {
				t.Errorf("query = %q, want %q", rec.rawQuery, tt.query)
			}
			wantAuth := ""
			if tt.wantAuth {
				wantAuth = "Bearer " + testKey
			}
			if rec.auth != wantAuth {
				t.Errorf("Authorization = %q, want %q", rec.auth, wantAuth)
			}
			wantToken := ""
			if tt.wantToken {
				wantToken = testToken
			}
			if rec.token != wantToken {
				t.Errorf("%s = %q, want %q", apitype.SandboxTokenHeader, rec.token, wantToken)
			}
			if !bytes.HasPrefix(rec.body, []byte(tt.bodyPrefix)) {
				t.Errorf("body = %q, want prefix %q", rec.body, tt.bodyPrefix)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        error // sentinel errors.Is must match
		notWant     error
		code        string
		msg         string
	}{
		{"json not found", 404, "application/json", `{"error":"no sandbox s1","code":"not_found"}`, ErrNotFound, ErrConflict, "not_found", "no sandbox s1"},
		{"json unauthorized", 401, "application/json", `{"error":"bad api key","code":"unauthorized"}`, ErrUnauthorized, ErrForbidden, "unauthorized", "bad api key"},
		{"json forbidden", 403, "application/json", `{"error":"bad sandbox token","code":"forbidden"}`, ErrForbidden, ErrUnauthorized, "forbidden", "bad sandbox token"},
		{"json bad request", 400, "application/json", `{"error":"path escapes /work","code":"bad_request"}`, ErrBadRequest, ErrNotFound, "bad_request", "path escapes /work"},
		{"json conflict", 409, "application/json", `{"error":"busy","code":"conflict"}`, ErrConflict, ErrNotFound, "conflict", "busy"},
		{"json too large", 413, "application/json", `{"error":"file too large","code":"too_large"}`, ErrTooLarge, ErrBadRequest, "too_large", "file too large"},
		{"code without status match", 500, "application/json", `{"error":"gone","code":"not_found"}`, ErrNotFound, nil, "not_found", "gone"},
		{"plain text", 404, "text/plain", "404 page not found\n", ErrNotFound, nil, "", "404 page not found"},
		{"html", 502, "text/html", "<html><body>Bad Gateway</body></html>", nil, ErrNotFound, "", "bad gateway"},
		{"empty", 503, "", "", ErrUnavailable, nil, "", "service unavailable"},
		{"json without error field", 409, "application/json", `{"foo":1}`, ErrConflict, nil, "", `{"foo":1}`},
		{"json gone", 410, "application/json", `{"error":"sandbox s1 is dead","code":"gone"}`, ErrGone, ErrNotFound, "gone", "sandbox s1 is dead"},
		{"binary", 500, "application/octet-stream", "\x00\x01\x02", nil, ErrNotFound, "", "internal server error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c := New(srv.URL, testKey)
			for _, call := range []func() error{
				func() error { _, err := c.GetSandbox(context.Background(), "s1"); return err },
				func() error {
					_, _, err := c.GetFile(context.Background(), "s1", testToken, "f")
					return err
				},
				func() error {
					_, err := c.PutFile(context.Background(), "s1", testToken, "f", 0o644, strings.NewReader("x"), 1)
					return err
				},
			} {
				err := call()
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v (%T), want *Error", err, err)
				}
				if ce.Status != tt.status || ce.Code != tt.code || ce.Message != tt.msg {
					t.Errorf("got %+v, want status %d code %q message %q", ce, tt.status, tt.code, tt.msg)
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Errorf("errors.Is(%v, %v) = false", err, tt.want)
				}
				if tt.notWant != nil && errors.Is(err, tt.notWant) {
					t.Errorf("errors.Is(%v, %v) = true", err, tt.notWant)
				}
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Status: 404, Code: "not_found", Message: "no sandbox s1"}
	if got, want := e.Error(), "no sandbox s1 (404 Not Found)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestPutFileLength(t *testing.T) {
	tests := []struct {
		name      string
		size      int64
		data      string
		wantLen   int64
		wantChunk bool
	}{
		{"known size", 5, "hello", 5, false},
		{"unknown size", -1, "hello", -1, true},
		{"empty", 0, "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.ContentLength != tt.wantLen {
					t.Errorf("ContentLength = %d, want %d", r.ContentLength, tt.wantLen)
				}
				chunked := len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
				if chunked != tt.wantChunk {
					t.Errorf("TransferEncoding = %v, want chunked %v", r.TransferEncoding, tt.wantChunk)
				}
				if string(body) != tt.data {
					t.Errorf("body = %q, want %q", body, tt.data)
				}
				json.NewEncoder(w).Encode(apitype.FileInfo{Path: "/work/f", Size: int64(len(body)), Mode: r.URL.Query().Get("mode")})
			}))
			defer srv.Close()
			// A reader type the transport can't size by itself.
			r := io.MultiReader(strings.NewReader(tt.data))
			fi, err := New(srv.URL, testKey).PutFile(context.Background(), "s1", testToken, "f", 0o600, r, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size != int64(len(tt.data)) || fi.Mode != "0600" {
				t.Errorf("FileInfo = %+v", fi)
			}
		})
	}
}

// TestPutFileStreams checks that the upload is sent as it is read: the
// second half is only produced after the daemon got the first, so a client
// that read the whole body before sending would deadlock.
func TestPutFileStreams(t *testing.T) {
	const half = 64 << 10
	gotFirst := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, half)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("read first half: %v", err)
			return
		}
		close(gotFirst)
		rest, _ := io.ReadAll(r.Body)
		json.NewEncoder(w).Encode(apitype.FileInfo{Size: int64(half + len(rest))})
	}))
	defer srv.Close()

	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, half))
		select {
		case <-gotFirst:
			pw.Write(make([]byte, half))
			pw.Close()
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("daemon never got the first half: body was buffered"))
		}
	}()
	fi, err := New(srv.URL, testKey).PutFile(context.Background(), "s1", testToken, "f", 0o644, pr, 2*half)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 2*half {
		t.Errorf("size = %d, want %d", fi.Size, 2*half)
	}
}

// closeRecorder notes whether it was closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestPutFileLeavesReaderOpen(t *testing.T) {
	c, _ := fakeDaemon(t)
	r := &closeRecorder{Reader: strings.NewReader("abc")}
	if _, err := c.PutFile(context.Background(), "s1", testToken, "f", 0o644, r, 3); err != nil {
		t.Fatal(err)
	}
	if r.closed {
		t.Error("PutFile closed the caller's reader")
	}
}

func TestGetFile(t *testing.T) {
	data := strings.Repeat("cove", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-File-Mode", "0750")
		w.Header().Set("Last-Modified", time.Unix(1700000000, 0).UTC().Format(http.TimeFormat))
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(data))
	}))
	defer srv.Close()
	rc, fi, err := New(srv.URL, testKey).GetFile(context.Background(), "s1", testToken, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != data {
		t.Errorf("body differs: %d bytes, want %d", len(got), len(data))
	}
	want := apitype.FileInfo{Path: "f", Type: "file", Size: int64(len(data)), Mode: "0750", MtimeUnix: 1700000000}
	if fi != want {
		t.Errorf("FileInfo = %+v, want %+v", fi, want)
	}
}

func TestTimeouts(t *testing.T) {
	const delay = 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/sandboxes" {
			io.WriteString(w, `[]`)
			return
		}
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	c := New(srv.URL, testKey, WithTimeout(50*time.Millisecond))
	ctx := context.Background()

	if _, err := c.Info(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Info past the timeout: err = %v, want deadline exceeded", err)
	}
	// An exec asking for more time gets it on top of the client's timeout.
	if _, err := c.Exec(ctx, "s1", testToken, apitype.ExecRequest{Args: []string{"sleep"}, TimeoutSecs: 5}); err != nil {
		t.Errorf("Exec with its own timeout: %v", err)
	}
	// Checkpoints get SlowTimeout on top.
	if _, err := c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "t"}); err != nil {
		t.Errorf("CreateSnapshot: %v", err)
	}
	if _, err := c.Branch(ctx, "s1", testToken, apitype.BranchRequest{N: 1}); err != nil {
		t.Errorf("Branch: %v", err)
	}
	if _, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: "t", N: 100}); err != nil {
		t.Errorf("CreateSandboxes n=100: %v", err)
	}
	// File transfers are bounded by ctx only.
	if _, err := c.PutFile(ctx, "s1", testToken, "f", 0o644, strings.NewReader("x"), 1); err != nil {
		t.Errorf("PutFile: %v", err)
	}
	rc, _, err := c.GetFile(ctx, "s1", testToken, "f")
	if err != nil {
		t.Errorf("GetFile: %v", err)
	} else {
		rc.Close()
	}
	// ...which does bound them.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.PutFile(short, "s1", testToken, "f", 0o644, strings.NewReader("x"), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PutFile past ctx deadline: err = %v, want deadline exceeded", err)
	}
}

func TestHealthUnhealthy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":false}`)
	}))
	defer srv.Close()
	if err := New(srv.URL, "").Health(context.Background()); err == nil {
		t.Error("Health = nil for ok:false")
	}
}
