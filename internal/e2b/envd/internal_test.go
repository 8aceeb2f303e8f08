package envd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/internal/e2b/pb/process"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func TestResolvePath(t *testing.T) {
	tests := []struct {
		p, home, want string
		err           bool
	}{
		{"/etc/hosts", "/home/user", "/etc/hosts", false},
		{"/a/b/../c", "", "/a/c", false},
		{"a.txt", "/home/user", "/home/user/a.txt", false},
		{"a.txt", "/root", "/root/a.txt", false},
		{"a.txt", "", "a.txt", false}, // cove resolves it against its work directory
		{"~", "/home/bob", "/home/bob", false},
		{"~/x/y", "/home/bob", "/home/bob/x/y", false},
		{"~", "", ".", false},
		{"", "/home/user", "", true},
	}
	for _, tc := range tests {
		got, err := resolvePath(tc.p, tc.home)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("resolvePath(%q, %q) = %q, %v; want %q, error %v", tc.p, tc.home, got, err, tc.want, tc.err)
		}
	}
}

func TestHomeOf(t *testing.T) {
	for user, want := range map[string]string{"": "", "root": "/root", "user": "/home/user", "bob": "/home/bob"} {
		if got := homeOf(user); got != want {
			t.Errorf("homeOf(%q) = %q, want %q", user, got, want)
		}
	}
}

func TestBasicUser(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		auth, want string
		err        bool
	}{
		{"", "", false},
		{"Basic " + b64("user:"), "user", false},
		{"basic " + b64("root:"), "root", false},
		{"Basic " + b64("alice"), "alice", false},
		{"Bearer xyz", "", false},
		{"Basic !!!", "", true},
	}
	for _, tc := range tests {
		got, err := basicUser(tc.auth)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("basicUser(%q) = %q, %v; want %q, error %v", tc.auth, got, err, tc.want, tc.err)
		}
	}
}

// The vectors are the SDK's computation (base64 SHA-256, padding cut),
// worked out independently.
func TestSignature(t *testing.T) {
	tests := []struct {
		p, op, user, tok string
		exp              int64
		want             string
	}{
		{"/home/user/a.txt", "read", "user", "tok123", 0, "v1_HB2bgZ+RgifWQVkD4WDT8wNBFTVrggZWSRD5EqI0H/0"},
		{"/home/user/a.txt", "write", "", "tok123", 1700000000, "v1_js9/4f5ea8GZ42Fpws+LDWeYh0p1HcmG8oA/zBD7lQ4"},
	}
	for _, tc := range tests {
		if got := Signature(tc.p, tc.op, tc.user, tc.tok, tc.exp); got != tc.want {
			t.Errorf("Signature(%q, %q, %q, %q, %d) = %s, want %s", tc.p, tc.op, tc.user, tc.tok, tc.exp, got, tc.want)
		}
	}
}

func TestEndEvent(t *testing.T) {
	tests := []struct {
		in     apitype.ExitStatus
		code   int32
		exited bool
		status string
		err    bool
	}{
		{apitype.ExitStatus{ExitCode: 0}, 0, true, "exit status 0", false},
		{apitype.ExitStatus{ExitCode: 2}, 2, true, "exit status 2", false},
		{apitype.ExitStatus{ExitCode: -1, Signal: "SIGKILL"}, -1, false, "signal: killed", false},
		{apitype.ExitStatus{ExitCode: -1, Signal: "SIGUSR1"}, -1, false, "signal: SIGUSR1", false},
		{apitype.ExitStatus{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}, -1, false, "signal: killed", true},
	}
	for _, tc := range tests {
		e := endEvent(tc.in).GetEnd()
		if e.GetExitCode() != tc.code || e.GetExited() != tc.exited || e.GetStatus() != tc.status || (e.Error != nil) != tc.err {
			t.Errorf("endEvent(%+v) = %v", tc.in, e)
		}
	}
}

func TestRef(t *testing.T) {
	tests := []struct {
		sel  *process.ProcessSelector
		want string
		err  bool
	}{
		{&process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 42}}, "42", false},
		{&process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "web"}}, "web", false},
		{&process.ProcessSelector{Selector: &process.ProcessSelector_Tag{}}, "", true},
		{nil, "", true},
	}
	for _, tc := range tests {
		got, err := ref(tc.sel)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ref(%v) = %q, %v", tc.sel, got, err)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for ae, want := range map[string]bool{"": false, "gzip": true, "deflate, gzip;q=1.0": true, "gzip;q=0": false, "br": false, "GZIP": true} {
		if got := acceptsGzip(ae); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", ae, got, want)
		}
	}
}

func TestCwdOf(t *testing.T) {
	dir := "/srv"
	tests := []struct {
		cfg        *process.ProcessConfig
		user, want string
	}{
		{&process.ProcessConfig{Cwd: &dir}, "user", "/srv"},
		{&process.ProcessConfig{}, "user", "/home/user"},
		{&process.ProcessConfig{}, "root", "/root"},
		{&process.ProcessConfig{}, "", ""}, // cove's work directory
	}
	for _, tc := range tests {
		if got := cwdOf(tc.cfg, tc.user); got != tc.want {
			t.Errorf("cwdOf(%v, %q) = %q, want %q", tc.cfg, tc.user, got, tc.want)
		}
	}
}

func TestKeepaliveOf(t *testing.T) {
	for v, want := range map[string]time.Duration{"": keepaliveEvery, "50": 50 * time.Second, "1": time.Second, "0": keepaliveEvery, "x": keepaliveEvery, "100000": keepaliveEvery} {
		h := http.Header{}
		h.Set("Keepalive-Ping-Interval", v)
		if got := keepaliveOf(h); got != want {
			t.Errorf("keepaliveOf(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestSandboxOfHost(t *testing.T) {
	for host, want := range map[string]string{
		"49983-abc123.e2b.example.com": "abc123",
		"49983-abc123.localhost:49983": "abc123",
		"localhost:49983":              "",
		"api.example.com":              "",
		"x-abc.example.com":            "",
		"49983-.example.com":           "",
		"127.0.0.1:49983":              "",
	} {
		if got := sandboxOfHost(host); got != want {
			t.Errorf("sandboxOfHost(%q) = %q, want %q", host, got, want)
		}
	}
}

func TestToConnect(t *testing.T) {
	ce := func(status int, code, msg string) error {
		return &client.Error{Status: status, Code: code, Message: msg}
	}
	tests := []struct {
		err  error
		want connect.Code
	}{
		{ce(404, "not_found", "no such file"), connect.CodeNotFound},
		{ce(401, "unauthorized", "bad token"), connect.CodeUnauthenticated},
		{ce(403, "forbidden", "wrong sandbox token"), connect.CodeUnauthenticated},
		{ce(409, "conflict", "sandbox abc is paused: resume it"), connect.CodeUnavailable},
		{ce(409, "conflict", "stdin is closed"), connect.CodeFailedPrecondition},
		{ce(410, "gone", "sandbox is dead"), connect.CodeUnavailable},
		{ce(503, "unavailable", "busy"), connect.CodeUnavailable},
		{ce(400, "bad_request", "bad path"), connect.CodeInvalidArgument},
		{ce(507, "insufficient_storage", "full"), connect.CodeResourceExhausted},
		{ce(408, "timeout", "slow"), connect.CodeDeadlineExceeded},
		{fmt.Errorf("wrapped: %w", ce(404, "", "Not Found")), connect.CodeNotFound},
		{context.Canceled, connect.CodeCanceled},
		{errors.New("boom"), connect.CodeUnknown},
		{connect.NewError(connect.CodeAlreadyExists, errors.New("x")), connect.CodeAlreadyExists},
	}
	for _, tc := range tests {
		if got := connect.CodeOf(toConnect(tc.err)); got != tc.want {
			t.Errorf("toConnect(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if toConnect(nil) != nil {
		t.Error("toConnect(nil) is not nil")
	}
}

func TestWatcherSweep(t *testing.T) {
	now := time.Now()
	wt := newWatcherTable(8)
	for id, w := range map[string]*watcher{
		"fresh":       {polled: now.Add(-time.Minute)},
		"idle":        {polled: now.Add(-watcherIdle - time.Second)},
		"ended":       {polled: now.Add(-endedIdle - time.Second), err: errors.New("gone")},
		"ended-fresh": {polled: now.Add(-time.Second), err: errors.New("gone")},
	} {
		w.cancel = func() {}
		wt.byID[id] = w
	}
	wt.sweepLocked(now)
	var left []string
	for id := range wt.byID {
		left = append(left, id)
	}
	slices.Sort(left)
	if fmt.Sprint(left) != "[ended-fresh fresh]" {
		t.Errorf("after a sweep: %v, want [ended-fresh fresh]", left)
	}
}
