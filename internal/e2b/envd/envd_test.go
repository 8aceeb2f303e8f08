package envd_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/cove-sandbox/cove/internal/api"
	"github.com/cove-sandbox/cove/internal/e2b/envd"
	"github.com/cove-sandbox/cove/internal/e2b/pb/filesystem"
	"github.com/cove-sandbox/cove/internal/e2b/pb/filesystem/filesystemconnect"
	"github.com/cove-sandbox/cove/internal/e2b/pb/process"
	"github.com/cove-sandbox/cove/internal/e2b/pb/process/processconnect"
	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const testKey = "test-api-key"

// env is cove's API over the fake runtime, one sandbox in it, and the envd
// facade in front, as the daemon wires them.
type env struct {
	apiURL, url string
	sb          apitype.SandboxInfo
	proc        processconnect.ProcessClient
	fs          filesystemconnect.FilesystemClient
	dir         string // a host directory the sandbox's absolute paths may use
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	svc := sandbox.New(sandbox.Config{
		Runtime: runtimetest.New(t), Store: st, Images: runtimetest.NewImages(map[string]string{"default": "default-0001"}),
		DefaultImage: "default", Logger: log, StartTimeout: 5 * time.Second, SnapshotDir: filepath.Join(t.TempDir(), "snapshots"),
		Limits: sandbox.Limits{DefaultTTL: 10 * time.Minute, MaxTTL: time.Hour, DefaultCPUs: 1, MaxCPUs: 4, DefaultMemoryMiB: 256,
			MaxMemoryMiB: 2048, MaxSandboxes: 10, DefaultDiskMiB: 1024, MaxDiskMiB: 4096, DefaultPids: 256, MaxPids: 1024},
	})
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	apiSrv := httptest.NewServer(api.New(api.Config{Service: svc, APIKey: testKey, Version: "v-test", Logger: log,
		Info: func(context.Context) apitype.Info { return apitype.Info{} }}))
	t.Cleanup(apiSrv.Close)
	c := client.New(apiSrv.URL, testKey)
	dir := t.TempDir()
	// The sandbox's default directory is dir, as E2B's are /home/user.
	sbs, err := c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{apiURL: apiSrv.URL, sb: sbs[0], dir: dir}
	srv := envd.New(envd.Config{
		Client: func(_ context.Context, id string) (*client.Client, error) {
			return client.New(apiSrv.URL, testKey), nil
		},
		Token: func(_ context.Context, id string) (string, bool) {
			return e.sb.Token, id == e.sb.ID
		},
		Logger: log,
	})
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e.url = hs.URL
	e.proc = processconnect.NewProcessClient(hs.Client(), hs.URL, connect.WithProtoJSON(), connect.WithInterceptors(e.headers("")))
	e.fs = filesystemconnect.NewFilesystemClient(hs.Client(), hs.URL, connect.WithProtoJSON(), connect.WithInterceptors(e.headers("")))
	return e
}

// headers is what the SDK sends on every envd call; token "" is the
// sandbox's own.
func (e *env) headers(token string) connect.Interceptor {
	return headerInterceptor(func(h http.Header) {
		if token == "" {
			token = e.sb.Token
		}
		h.Set(envd.HeaderSandboxID, e.sb.ID)
		h.Set(envd.HeaderSandboxPort, "49983")
		h.Set(envd.HeaderAccessToken, token)
	})
}

type headerInterceptor func(http.Header)

func (f headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		f(r.Header())
		return next(ctx, r)
	}
}

func (f headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		f(c.RequestHeader())
		return c
	}
}

func (f headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result is a process stream read to its end.
type result struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *process.ProcessEvent_EndEvent
}

// collect reads a Start or Connect stream; each is told of every data
// event (to answer it), and may stop the read early by returning true.
func collect[T interface{ GetEvent() *process.ProcessEvent }](t *testing.T, s interface {
	Receive() bool
	Msg() T
	Err() error
}, pid uint32, each func(*result) bool) result {
	t.Helper()
	r := result{pid: pid}
	for s.Receive() {
		switch ev := s.Msg().GetEvent().GetEvent().(type) {
		case *process.ProcessEvent_Start:
			if r.pid != 0 {
				t.Fatalf("a second start event")
			}
			r.pid = ev.Start.GetPid()
		case *process.ProcessEvent_Data:
			if r.pid == 0 {
				t.Fatalf("data before the start event")
			}
			r.stdout += string(ev.Data.GetStdout())
			r.stderr += string(ev.Data.GetStderr())
			r.pty += string(ev.Data.GetPty())
			if each != nil && each(&r) {
				return r
			}
		case *process.ProcessEvent_End:
			r.end = ev.End
			return r
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return r
}

func start(cmd string, args ...string) *process.StartRequest {
	return &process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd, Args: args}}
}

func TestStartForeground(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name   string
		req    *process.StartRequest
		stdout string
		stderr string
		code   int32
		exited bool
		status string
	}{
		{"output and exit code", start("/bin/sh", "-c", "echo out; echo err >&2; exit 3"), "out\n", "err\n", 3, true, "exit status 3"},
		{"env and cwd", &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo $FOO; pwd"},
			Envs: map[string]string{"FOO": "bar"}, Cwd: &e.dir}}, "bar\n" + e.dir + "\n", "", 0, true, "exit status 0"},
		{"stdin false reads EOF", &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/cat"}, Stdin: new(bool)}, "", "", 0, true, "exit status 0"},
		{"killed by a signal", start("/bin/sh", "-c", "kill -9 $$"), "", "", -1, false, "signal: killed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := e.proc.Start(ctx, connect.NewRequest(tc.req))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r := collect(t, s, 0, nil)
			if r.pid == 0 || r.end == nil {
				t.Fatalf("pid %d, end %v: want both", r.pid, r.end)
			}
			if r.stdout != tc.stdout || r.stderr != tc.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", r.stdout, r.stderr, tc.stdout, tc.stderr)
			}
			if r.end.GetExitCode() != tc.code || r.end.GetExited() != tc.exited || r.end.GetStatus() != tc.status {
				t.Errorf("end %v, want code %d exited %v status %q", r.end, tc.code, tc.exited, tc.status)
			}
		})
	}
}

func TestBackgroundProcess(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tag := "cat-1"
	s, err := e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/cat"}, Tag: &tag}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() || s.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event first: %v %v", s.Msg(), s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()

	list, err := e.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid {
			found = p.GetTag() == tag && p.GetConfig().GetCmd() == "/bin/cat"
		}
	}
	if !found {
		t.Fatalf("List %v has no pid %d tagged %q", list.Msg, pid, tag)
	}

	// A second client connects by tag and sees what is written from now on.
	cs, err := e.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if !cs.Receive() || cs.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("connect: no start event with pid %d: %v %v", pid, cs.Msg(), cs.Err())
	}
	byPid := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	if _, err := e.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: byPid,
		Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("hello\n")}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: byPid})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, s, pid, nil)
	if r.stdout != "hello\n" || r.end.GetExitCode() != 0 || !r.end.GetExited() {
		t.Errorf("start stream: stdout %q end %v, want hello and exit 0", r.stdout, r.end)
	}
	rc := collect(t, cs, pid, nil)
	if rc.stdout != "hello\n" || rc.end.GetExitCode() != 0 {
		t.Errorf("connect stream: stdout %q end %v, want hello and exit 0", rc.stdout, rc.end)
	}
	// Gone now: signals and connects are not_found, as under envd.
	if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: byPid, Signal: process.Signal_SIGNAL_SIGKILL})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("signal to an exited process: %v, want not_found", err)
	}
}

func TestSendSignal(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		sig    process.Signal
		status string
	}{{process.Signal_SIGNAL_SIGKILL, "signal: killed"}, {process.Signal_SIGNAL_SIGTERM, "signal: terminated"}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			s, err := e.proc.Start(ctx, connect.NewRequest(start("/bin/sleep", "100")))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !s.Receive() {
				t.Fatal(s.Err())
			}
			pid := s.Msg().GetEvent().GetStart().GetPid()
			if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
				Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: tc.sig})); err != nil {
				t.Fatal(err)
			}
			r := collect(t, s, pid, nil)
			if r.end.GetExitCode() != -1 || r.end.GetExited() || r.end.GetStatus() != tc.status {
				t.Errorf("end %v, want -1, not exited, %q", r.end, tc.status)
			}
		})
	}
}

func TestPTY(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	req := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/sh", Envs: map[string]string{"PS1": "$ "}},
		Pty: &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}}
	s, err := e.proc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	list, err := e.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetProcesses()); n != 1 || list.Msg.GetProcesses()[0].GetPid() != pid {
		t.Errorf("List %v, want the terminal %d", list.Msg, pid)
	}
	if _, err := e.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 101, Rows: 33}}})); err != nil {
		t.Fatal(err)
	}
	type_ := func(s string) {
		t.Helper()
		if _, err := e.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel,
			Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte(s)}}})); err != nil {
			t.Fatal(err)
		}
	}
	// Another token reaches nothing of the terminal.
	other := processconnect.NewProcessClient(http.DefaultClient, e.url, connect.WithProtoJSON(), connect.WithInterceptors(e.headers("not-the-token")))
	for name, call := range map[string]func() error{
		"SendInput": func() error {
			_, err := other.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel,
				Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("echo intruder\n")}}}))
			return err
		},
		"Update": func() error {
			_, err := other.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 9, Rows: 9}}}))
			return err
		},
		"SendSignal": func() error {
			_, err := other.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGKILL}))
			return err
		},
		"Connect": func() error {
			s, err := other.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: sel}))
			if err != nil {
				return err
			}
			for s.Receive() {
			}
			return s.Err()
		},
	} {
		if code := connect.CodeOf(call()); code != connect.CodeUnauthenticated {
			t.Errorf("%s with another token: %v, want unauthenticated", name, code)
		}
	}
	type_("stty size; echo mark-$((6*7))\n")
	r := collect(t, s, pid, func(r *result) bool { return strings.Contains(r.pty, "mark-42") })
	if strings.Contains(r.pty, "intruder") {
		t.Errorf("another token typed on the terminal: %q", r.pty)
	}
	if !strings.Contains(r.pty, "33 101") {
		t.Errorf("terminal output %q: no size 33 101 after the resize", r.pty)
	}
	if _, err := e.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("CloseStdin on a terminal: %v, want failed_precondition", err)
	}
	if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	r = collect(t, s, pid, nil)
	if r.end == nil || r.end.GetExitCode() == 0 {
		t.Errorf("end after a kill %v, want a non-zero end", r.end)
	}
	if _, err := e.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 1, Rows: 1}}})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Update of a killed terminal: %v, want not_found", err)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	hc := http.DefaultClient
	wrongTok := processconnect.NewProcessClient(hc, e.url, connect.WithProtoJSON(), connect.WithInterceptors(e.headers("not-the-token")))
	unknown := processconnect.NewProcessClient(hc, e.url, connect.WithProtoJSON(), connect.WithInterceptors(headerInterceptor(func(h http.Header) {
		h.Set(envd.HeaderSandboxID, "nosuchsandbox")
		h.Set(envd.HeaderAccessToken, e.sb.Token)
	})))
	noTok := processconnect.NewProcessClient(hc, e.url, connect.WithProtoJSON(), connect.WithInterceptors(headerInterceptor(func(h http.Header) {
		h.Set(envd.HeaderSandboxID, e.sb.ID)
	})))
	noID := processconnect.NewProcessClient(hc, e.url, connect.WithProtoJSON())
	missing := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 999999}}
	tests := []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"wrong token", func() error { _, err := wrongTok.List(ctx, connect.NewRequest(&process.ListRequest{})); return err }, connect.CodeUnauthenticated},
		{"no token", func() error { _, err := noTok.List(ctx, connect.NewRequest(&process.ListRequest{})); return err }, connect.CodeUnauthenticated},
		{"unknown sandbox", func() error { _, err := unknown.List(ctx, connect.NewRequest(&process.ListRequest{})); return err }, connect.CodeNotFound},
		{"no sandbox header", func() error { _, err := noID.List(ctx, connect.NewRequest(&process.ListRequest{})); return err }, connect.CodeInvalidArgument},
		{"input to a missing pid", func() error {
			_, err := e.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: missing, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("x")}}}))
			return err
		}, connect.CodeNotFound},
		{"connect to a missing pid", func() error {
			s, err := e.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: missing}))
			if err != nil {
				return err
			}
			for s.Receive() {
			}
			return s.Err()
		}, connect.CodeNotFound},
		{"no selector", func() error {
			_, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{}))
			return err
		}, connect.CodeInvalidArgument},
		{"stat a missing path", func() error {
			_, err := e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: e.dir + "/nope"}))
			return err
		}, connect.CodeNotFound},
		{"start with no cmd", func() error {
			s, err := e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{}))
			if err != nil {
				return err
			}
			for s.Receive() {
			}
			return s.Err()
		}, connect.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := connect.CodeOf(tc.call()); got != tc.want {
				t.Errorf("code %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFilesystem(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	d := e.dir + "/a"
	mk, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: d + "/b"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := mk.Msg.GetEntry(); got.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY || got.GetPath() != d+"/b" || got.GetName() != "b" {
		t.Errorf("MakeDir entry %v", got)
	}
	if _, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: d + "/b"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("MakeDir of an existing dir: %v, want already_exists", err)
	}
	if err := os.WriteFile(d+"/b/f.txt", []byte("12345"), 0o640); err != nil {
		t.Fatal(err)
	}
	st, err := e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: d + "/b/f.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetEntry(); got.GetSize() != 5 || got.GetType() != filesystem.FileType_FILE_TYPE_FILE || got.GetPermissions() != "-rw-r-----" ||
		got.GetMode() != 0o640 || got.GetModifiedTime().AsTime().IsZero() {
		t.Errorf("Stat entry %v", got)
	}

	for _, tc := range []struct {
		depth uint32
		want  []string
	}{{1, []string{d + "/b"}}, {2, []string{d + "/b", d + "/b/f.txt"}}, {0, []string{d + "/b"}}} {
		ls, err := e.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: d, Depth: tc.depth}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, en := range ls.Msg.GetEntries() {
			got = append(got, en.GetPath())
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ListDir depth %d: %v, want %v", tc.depth, got, tc.want)
		}
	}
	if _, err := e.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: d + "/b/f.txt"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListDir of a file: %v, want invalid_argument", err)
	}

	mv, err := e.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: d + "/b/f.txt", Destination: d + "/g.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if mv.Msg.GetEntry().GetPath() != d+"/g.txt" {
		t.Errorf("Move entry %v", mv.Msg.GetEntry())
	}
	if _, err := os.Stat(d + "/g.txt"); err != nil {
		t.Errorf("after Move: %v", err)
	}
	if _, err := e.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: d})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove: %v", err)
	}
	if _, err := e.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: d})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Remove of a missing path: %v, want not_found", err)
	}
}

func TestWatchDir(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := os.MkdirAll(e.dir+"/w/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, recursive := range []bool{false, true} {
		t.Run("recursive="+strconv.FormatBool(recursive), func(t *testing.T) {
			s, err := e.fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: e.dir + "/w", Recursive: recursive, IncludeEntry: true}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !s.Receive() || s.Msg().GetStart() == nil {
				t.Fatalf("first event %v (%v), want start", s.Msg(), s.Err())
			}
			name := "sub/deep-" + strconv.FormatBool(recursive)
			if !recursive {
				name = "top"
			}
			if err := os.WriteFile(e.dir+"/w/"+name, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			for s.Receive() {
				fe := s.Msg().GetFilesystem()
				if fe == nil {
					continue
				}
				if fe.GetName() != name {
					t.Fatalf("event for %q, want %q", fe.GetName(), name)
				}
				if fe.GetType() == filesystem.EventType_EVENT_TYPE_CREATE {
					if fe.GetEntry().GetPath() != e.dir+"/w/"+name {
						t.Errorf("create event's entry %v, want %s", fe.GetEntry(), name)
					}
					return
				}
			}
			t.Fatalf("the watch ended: %v", s.Err())
		})
	}
	t.Run("missing directory", func(t *testing.T) {
		s, err := e.fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: e.dir + "/nope"}))
		if err == nil {
			for s.Receive() {
				t.Errorf("an event %v from a missing directory", s.Msg())
			}
			err = s.Err()
		}
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("WatchDir of a missing directory: %v, want not_found", err)
		}
	})
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	w, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: e.dir, Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := w.Msg.GetWatcherId()
	if err := os.WriteFile(e.dir+"/polled", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(fmt.Sprint(got), "polled/EVENT_TYPE_CREATE") {
		evs, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Msg.GetEvents() {
			got = append(got, ev.GetName()+"/"+ev.GetType().String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(fmt.Sprint(got), "polled/EVENT_TYPE_CREATE") {
		t.Fatalf("events %v: no create of polled", got)
	}
	other := filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url, connect.WithProtoJSON(), connect.WithInterceptors(e.headers("other-token")))
	if _, err := other.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id})); err == nil {
		t.Errorf("another token read the watcher")
	}
	if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	// A sandbox holds at most a quarter of the table (MaxWatchers 256: 64).
	var ids []string
	for i := 0; ; i++ {
		w, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: e.dir}))
		if err != nil {
			if connect.CodeOf(err) != connect.CodeResourceExhausted || i != 64 {
				t.Fatalf("watcher %d: %v, want resource_exhausted at 64", i, err)
			}
			break
		}
		ids = append(ids, w.Msg.GetWatcherId())
	}
	for _, id := range ids {
		if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed watcher: %v, want not_found", err)
	}
}

// do sends an HTTP request to the facade with the sandbox's headers.
func (e *env) do(t *testing.T, method, path string, body io.Reader, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(envd.HeaderSandboxID, e.sb.ID)
	req.Header.Set(envd.HeaderAccessToken, e.sb.Token)
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestFiles(t *testing.T) {
	e := newEnv(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	p := e.dir + "/up/octet.bin"

	resp, b := e.do(t, "POST", "/files?path="+url.QueryEscape(p), bytes.NewReader(big), map[string]string{"Content-Type": "application/octet-stream"})
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"path":"`+p+`"`) {
		t.Fatalf("octet upload: %d %s", resp.StatusCode, b)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, big) {
		t.Fatalf("octet upload wrote %d bytes, want %d", len(got), len(big))
	}

	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for i, name := range []string{e.dir + "/m/one.txt", e.dir + "/m/two.txt"} {
		fw, _ := mw.CreateFormFile("file", name)
		fmt.Fprintf(fw, "content %d", i)
	}
	mw.Close()
	resp, b = e.do(t, "POST", "/files", &mp, map[string]string{"Content-Type": mw.FormDataContentType()})
	var ups []map[string]string
	if resp.StatusCode != 200 || json.Unmarshal(b, &ups) != nil || len(ups) != 2 || ups[1]["path"] != e.dir+"/m/two.txt" || ups[0]["type"] != "file" {
		t.Fatalf("multipart upload: %d %s", resp.StatusCode, b)
	}
	if got, _ := os.ReadFile(e.dir + "/m/two.txt"); string(got) != "content 1" {
		t.Errorf("multipart wrote %q", got)
	}

	resp, b = e.do(t, "GET", "/files?path="+url.QueryEscape(p), nil, nil)
	if resp.StatusCode != 200 || !bytes.Equal(b, big) {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(b))
	}
	resp, b = e.do(t, "GET", "/files?path="+url.QueryEscape(p), nil, map[string]string{"Accept-Encoding": "gzip"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip download: %d %v", resp.StatusCode, resp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(zr); !bytes.Equal(got, big) || len(b) >= len(big) {
		t.Errorf("gzip download: %d bytes compressed, %d unpacked", len(b), len(got))
	}

	exp := time.Now().Add(time.Minute).Unix()
	signed := func(path, op, user, tok string, exp int64) string {
		q := url.Values{"path": {path}, "signature": {envd.Signature(path, op, user, tok, exp)}}
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		if user != "" {
			q.Set("username", user)
		}
		return "/files?" + q.Encode()
	}
	noTok := map[string]string{envd.HeaderAccessToken: ""}
	tests := []struct {
		name   string
		method string
		path   string
		h      map[string]string
		want   int
	}{
		{"signed read", "GET", signed(p, "read", "", e.sb.Token, exp), noTok, 200},
		{"signed read, no expiry", "GET", signed(p, "read", "", e.sb.Token, 0), noTok, 200},
		{"signed for another op", "GET", signed(p, "write", "", e.sb.Token, exp), noTok, 401},
		{"signed with another token", "GET", signed(p, "read", "", "nope", exp), noTok, 401},
		{"signed, expired", "GET", signed(p, "read", "", e.sb.Token, time.Now().Add(-time.Second).Unix()), noTok, 401},
		{"signed, routed by host", "GET", signed(p, "read", "", e.sb.Token, exp),
			map[string]string{envd.HeaderAccessToken: "", envd.HeaderSandboxID: "", "Host": "49983-" + e.sb.ID + ".localhost"}, 200},
		{"no sandbox id", "GET", signed(p, "read", "", e.sb.Token, exp), map[string]string{envd.HeaderAccessToken: "", envd.HeaderSandboxID: ""}, 400},
		{"no token, no signature", "GET", "/files?path=" + url.QueryEscape(p), noTok, 401},
		{"wrong token", "GET", "/files?path=" + url.QueryEscape(p), map[string]string{envd.HeaderAccessToken: "nope"}, 401},
		{"missing file", "GET", "/files?path=" + url.QueryEscape(e.dir+"/nope"), nil, 404},
		{"no path", "GET", "/files", nil, 400},
		{"health", "GET", "/health", noTok, 204},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do(t, tc.method, tc.path, nil, tc.h)
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %s, want %d", resp.StatusCode, b, tc.want)
			}
			if tc.want >= 400 {
				var eb struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if json.Unmarshal(b, &eb) != nil || eb.Code != tc.want || eb.Message == "" {
					t.Errorf("error body %s, want {code: %d, message}", b, tc.want)
				}
			}
		})
	}
}

// TestWire speaks the Connect protocol by hand, as the SDK's JSON codec
// does: unary application/json, a server stream as application/connect+json
// envelopes ending with the end-of-stream frame; and the same over h2c.
func TestWire(t *testing.T) {
	e := newEnv(t)
	post := func(hc *http.Client, path, ctype string, body []byte) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", e.url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set(envd.HeaderSandboxID, e.sb.ID)
		req.Header.Set(envd.HeaderAccessToken, e.sb.Token)
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(":")))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	h2c := &http.Client{Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	for _, hc := range []struct {
		name  string
		c     *http.Client
		proto int
	}{{"http1", http.DefaultClient, 1}, {"h2c", h2c, 2}} {
		t.Run(hc.name, func(t *testing.T) {
			resp := post(hc.c, "/process.Process/List", "application/json", []byte(`{}`))
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || resp.ProtoMajor != hc.proto || resp.Header.Get("Content-Type") != "application/json" || !json.Valid(b) {
				t.Fatalf("unary: %s %d %v %s", resp.Proto, resp.StatusCode, resp.Header, b)
			}
			resp = post(hc.c, "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/nope-nope"}`))
			b, _ = io.ReadAll(resp.Body)
			if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":"not_found"`) {
				t.Errorf("unary error: %d %s, want 404 not_found", resp.StatusCode, b)
			}

			req := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","printf hi"]},"stdin":false}`)
			env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
			resp = post(hc.c, "/process.Process/Start", "application/connect+json", append(env, req...))
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
				t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
			}
			br := bufio.NewReader(resp.Body)
			var msgs []string
			for {
				var hdr [5]byte
				if _, err := io.ReadFull(br, hdr[:]); err != nil {
					t.Fatalf("after %v: %v", msgs, err)
				}
				msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
				if _, err := io.ReadFull(br, msg); err != nil {
					t.Fatal(err)
				}
				if hdr[0]&2 != 0 { // end of stream
					if string(msg) != "{}" && !strings.HasPrefix(string(msg), `{"metadata"`) {
						t.Errorf("end-of-stream frame %s", msg)
					}
					break
				}
				msgs = append(msgs, string(msg))
			}
			all := strings.Join(msgs, "\n")
			// JSON names are the proto's camelCase; bytes are base64 ("hi" = aGk=).
			for _, want := range []string{`"start":{"pid":`, `"stdout":"aGk="`, `"end":{`, `"exited":true`, `"status":"exit status 0"`} {
				if !strings.Contains(all, want) {
					t.Errorf("stream %s: no %s", all, want)
				}
			}
		})
	}
}

// A quiet stream sends keepalives as often as the client's
// Keepalive-Ping-Interval asks (the SDK sends 50 s; here 1 s).
func TestKeepalive(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	req := connect.NewRequest(start("/bin/sh", "-c", "sleep 2.5; echo done"))
	req.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := e.proc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var kinds []string
	for s.Receive() {
		switch s.Msg().GetEvent().GetEvent().(type) {
		case *process.ProcessEvent_Start:
			kinds = append(kinds, "start")
		case *process.ProcessEvent_Keepalive:
			kinds = append(kinds, "keepalive")
		case *process.ProcessEvent_Data:
			kinds = append(kinds, "data")
		case *process.ProcessEvent_End:
			kinds = append(kinds, "end")
		}
	}
	got := strings.Join(kinds, ",")
	if !strings.HasPrefix(got, "start,keepalive,keepalive") || !strings.HasSuffix(got, "data,end") {
		t.Errorf("events %s, want start, 2 keepalives or more, data, end", got)
	}
}

// Relative paths start where the sandbox's commands do: its default
// directory (E2B's /home/user), for files and processes alike.
func TestRelativePaths(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := os.WriteFile(e.dir+"/rel.txt", []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"rel.txt", "~/rel.txt", "./rel.txt"} {
		st, err := e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: p}))
		if err != nil {
			t.Fatalf("Stat %s: %v", p, err)
		}
		if st.Msg.GetEntry().GetPath() != e.dir+"/rel.txt" {
			t.Errorf("Stat %s: %s, want %s/rel.txt", p, st.Msg.GetEntry().GetPath(), e.dir)
		}
	}
	resp, b := e.do(t, "GET", "/files?path=rel.txt", nil, nil)
	if resp.StatusCode != 200 || string(b) != "abc" {
		t.Errorf("GET /files?path=rel.txt: %d %q", resp.StatusCode, b)
	}
	s, err := e.proc.Start(ctx, connect.NewRequest(start("/bin/pwd")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := collect(t, s, 0, nil); r.stdout != e.dir+"\n" {
		t.Errorf("pwd: %q, want %s", r.stdout, e.dir)
	}
}

// StreamInput, a client stream, over h2c: its start names the process,
// its data events are its stdin in order.
func TestStreamInput(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	h2c := &http.Client{Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	pc := processconnect.NewProcessClient(h2c, e.url, connect.WithProtoJSON(), connect.WithInterceptors(e.headers("")))
	stdin := true
	s, err := pc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/cat"}, Stdin: &stdin}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	in := pc.StreamInput(ctx)
	msgs := []*process.StreamInputRequest{
		{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("one ")}}}}},
		{Event: &process.StreamInputRequest_Keepalive{Keepalive: &process.StreamInputRequest_KeepAlive{}}},
		{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("two\n")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, s, pid, nil); r.stdout != "one two\n" || r.end.GetExitCode() != 0 {
		t.Errorf("stdout %q end %v, want \"one two\\n\" and exit 0", r.stdout, r.end)
	}
	bad := pc.StreamInput(ctx)
	bad.Send(msgs[1]) // data before any start
	if _, err := bad.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("data before start: %v, want invalid_argument", err)
	}
}
