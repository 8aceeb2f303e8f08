package sandbox

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

func TestOpen(t *testing.T) {
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{})
	other := e.createOne(t, CreateOptions{})
	tests := []struct {
		name, id, token string
		want            error
	}{
		{"right token", info.ID, info.Token, nil},
		{"missing token", info.ID, "", ErrNoToken}, // an ErrForbidden the API words
		{"wrong token", info.ID, strings.Repeat("0", 48), ErrForbidden},
		{"another sandbox's token", info.ID, other.Token, ErrForbidden},
		{"token's prefix", info.ID, info.Token[:10], ErrForbidden},
		{"unknown id", "sb-000000000000", info.Token, ErrNoSandbox},
		{"empty id", "", info.Token, ErrNoSandbox},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := e.svc.Open(context.Background(), tc.id, tc.token)
			if tc.want == nil {
				if err != nil || sb.ID() != tc.id {
					t.Fatalf("Open = %v, %v", sb, err)
				}
				return
			}
			wantErr(t, err, tc.want)
			if sb != nil {
				t.Error("Open returned a handle with its error")
			}
		})
	}
}

func TestDataPlane(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	// Exec reaches this sandbox's agent: it runs in the sandbox's work dir.
	if got, want := e.exec(t, info.ID, info.Token, "echo hello; pwd"), "hello\n"+e.rt.WorkDir(info.ID)+"\n"; got != want {
		t.Errorf("exec output = %q, want %q", got, want)
	}
	res, err := sb.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "echo oops >&2; exit 3"}})
	if err != nil || res.ExitCode != 3 || res.Stderr != "oops\n" {
		t.Errorf("failing exec = %+v, %v", res, err)
	}
	if n := e.svc.Stats().Execs.Load(); n != 2 {
		t.Errorf("Stats().Execs = %d, want 2", n)
	}
	if p, err := sb.Ping(ctx); err != nil || p.Hostname != info.ID {
		t.Errorf("Ping = %+v, %v", p, err)
	}

	// Files.
	fi, err := sb.Put(ctx, PutRequest{Path: "dir/a.txt", Mode: 0o600}, strings.NewReader("content"))
	if err != nil || fi.Size != 7 || fi.Mode != 0o600 || fi.Type != "file" || fi.ModTime.IsZero() {
		t.Fatalf("Put = %+v, %v", fi, err)
	}
	if got := e.exec(t, info.ID, info.Token, "cat dir/a.txt"); got != "content" {
		t.Errorf("cat = %q", got)
	}
	_, rc, err := sb.Get(ctx, GetRequest{Path: "dir/a.txt"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "content" {
		t.Errorf("Get = %q, %v", b, err)
	}
	ls, err := sb.List(ctx, ListRequest{Path: "dir"})
	if err != nil || len(ls.Entries) != 1 {
		t.Errorf("List = %+v, %v", ls, err)
	}
	w, err := sb.Wait(ctx, WaitRequest{Path: "dir/a.txt", Text: "tent", Timeout: time.Second})
	if err != nil || !w.Found {
		t.Errorf("Wait = %+v, %v", w, err)
	}
}

// Data-plane calls refused before they reach the agent, or mapped from its
// answer.
func TestDataPlaneRefused(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)
	if _, err := sb.Put(ctx, PutRequest{Path: "dir/a.txt"}, strings.NewReader("content")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"exec without a command", func() error { _, err := sb.Exec(ctx, ExecRequest{}); return err }, ErrInvalid},
		{"exec args and shell", func() error {
			_, err := sb.Exec(ctx, ExecRequest{Args: []string{"true"}, Shell: "true"})
			return err
		}, ErrInvalid},
		{"exec negative timeout", func() error {
			_, err := sb.Exec(ctx, ExecRequest{Shell: "true", Timeout: -time.Millisecond})
			return err
		}, ErrInvalid},
		{"exec NUL in args", func() error { _, err := sb.Exec(ctx, ExecRequest{Args: []string{"echo", "a\x00"}}); return err }, ErrInvalid},
		{"exec NUL in env", func() error {
			_, err := sb.Exec(ctx, ExecRequest{Shell: "true", Env: []string{"A=\x00"}})
			return err
		}, ErrInvalid},
		{"exec huge argument", func() error {
			_, err := sb.Exec(ctx, ExecRequest{Args: []string{"echo", strings.Repeat("a", 10<<20)}})
			return err
		}, ErrInvalid},
		{"exec huge stdin", func() error {
			_, err := sb.Exec(ctx, ExecRequest{Args: []string{"wc", "-c"}, Stdin: make([]byte, agentproto.MaxStdin+1)})
			return err
		}, ErrTooLarge},
		{"eval empty", func() error { _, err := sb.Eval(ctx, EvalRequest{}); return err }, ErrInvalid},
		{"put dotdot", func() error {
			_, err := sb.Put(ctx, PutRequest{Path: "../x"}, strings.NewReader(""))
			return err
		}, ErrInvalid},
		{"put bad mode", func() error {
			_, err := sb.Put(ctx, PutRequest{Path: "x", Mode: 0o10000}, strings.NewReader(""))
			return err
		}, ErrInvalid},
		{"put onto a directory", func() error {
			_, err := sb.Put(ctx, PutRequest{Path: "dir"}, strings.NewReader(""))
			return err
		}, ErrInvalid},
		{"get dotdot", func() error { _, _, err := sb.Get(ctx, GetRequest{Path: "a/../b"}); return err }, ErrInvalid},
		{"get missing", func() error { _, _, err := sb.Get(ctx, GetRequest{Path: "missing"}); return err }, ErrNotFound},
		{"get negative offset", func() error {
			_, _, err := sb.Get(ctx, GetRequest{Path: "dir/a.txt", Offset: -1})
			return err
		}, ErrInvalid},
		{"list deep", func() error { _, err := sb.List(ctx, ListRequest{Path: ".", Depth: 65}); return err }, ErrInvalid},
		{"wait no text", func() error { _, err := sb.Wait(ctx, WaitRequest{Path: "x"}); return err }, ErrInvalid},
		{"wait negative timeout", func() error {
			_, err := sb.Wait(ctx, WaitRequest{Path: "x", Text: "y", Timeout: -time.Millisecond})
			return err
		}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.call(), tc.want) })
	}
}

func TestDataPlaneConnection(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	// A broken agent connection is replaced on the next call.
	e.svc.mu.Lock()
	old := e.svc.boxes[info.ID].agent
	e.svc.mu.Unlock()
	e.rt.DropConns(info.ID)
	<-old.Closed()
	if got := e.exec(t, info.ID, info.Token, "echo again"); got != "again\n" {
		t.Errorf("exec after a dropped connection = %q", got)
	}

	// A handle outlives its sandbox only as an error.
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	_, err := sb.Exec(ctx, ExecRequest{Shell: "true"})
	wantErr(t, err, ErrNotFound)
}
