package sandbox

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEnvList(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string // nil: an error
	}{
		{nil, []string{}},
		{map[string]string{"B": "2", "A": "x=y"}, []string{"A=x=y", "B=2"}},
		{map[string]string{"A": ""}, []string{"A="}},
		{map[string]string{"": "1"}, nil},
		{map[string]string{"A=B": "1"}, nil},
		{map[string]string{"A\x00": "1"}, nil},
	}
	for _, tt := range tests {
		got, err := EnvList(tt.env)
		if tt.want == nil {
			if err == nil {
				t.Errorf("EnvList(%q) = %q, want an error", tt.env, got)
			} else {
				wantErr(t, err, ErrInvalid)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("EnvList(%q) = %q, %v; want %q", tt.env, got, err, tt.want)
		}
	}
}

// A sandbox's env and cwd apply to every exec (the exec's own env on top,
// its own cwd instead), go to a branch's children and a spawn's unless
// the call gives its own, and a cwd the sandbox lacks refuses the create.
// The fake runtime's agent runs on the host, so the cwd is a host dir.
func TestRunEnv(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	dir, other := t.TempDir(), t.TempDir()
	src := e.createOne(t, CreateOptions{Env: map[string]string{"COVE_A": "1", "COVE_B": "2"}, Cwd: dir})
	if src.Env["COVE_A"] != "1" || src.Cwd != dir {
		t.Fatalf("created with env %v cwd %q", src.Env, src.Cwd)
	}
	run := func(id, token string, req ExecRequest) string {
		t.Helper()
		req.Shell = `echo "$COVE_A $COVE_B $(pwd)"`
		res, err := e.open(t, id, token).Exec(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	if got, want := run(src.ID, src.Token, ExecRequest{}), "1 2 "+dir; got != want {
		t.Errorf("exec sees %q, want %q", got, want)
	}
	if got, want := run(src.ID, src.Token, ExecRequest{Env: []string{"COVE_B=3"}, Cwd: other}), "1 3 "+other; got != want {
		t.Errorf("exec with its own env and cwd sees %q, want %q", got, want)
	}
	br, err := e.open(t, src.ID, src.Token).Branch(ctx, BranchOptions{Tag: "br", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c := br.Children[0]; run(c.ID, c.Token, ExecRequest{}) != "1 2 "+dir {
		t.Errorf("a branch child lost the env or cwd: %+v", c)
	}
	own := e.createOne(t, CreateOptions{SnapshotTag: "br", SnapshotToken: src.Token, Env: map[string]string{"COVE_A": "9"}, Cwd: other})
	if got, want := run(own.ID, own.Token, ExecRequest{}), "9  "+other; got != want {
		t.Errorf("a spawn with its own sees %q, want %q", got, want)
	}

	before := e.rt.Starts()
	for _, o := range []CreateOptions{
		{Cwd: filepath.Join(dir, "missing")},
		{Env: map[string]string{"A=B": "1"}},
		{Cwd: "with\x00nul"},
	} {
		_, err := e.svc.Create(ctx, o)
		wantErr(t, err, ErrInvalid)
	}
	if n := e.rt.Starts() - before; n > 1 {
		t.Errorf("refused creates started %d sandboxes; only the missing cwd needs one", n)
	}
	if n := e.svc.Count(); n != 3 {
		t.Errorf("%d sandboxes live after refused creates, want 3", n)
	}
	_, err = e.open(t, src.ID, src.Token).Branch(ctx, BranchOptions{Tag: "bad", Cwd: filepath.Join(dir, "missing")})
	wantErr(t, err, ErrInvalid)
	e.restart(t)
	if got, err := e.svc.Get(context.Background(), own.ID); err != nil || got.Env["COVE_A"] != "9" || got.Cwd != other {
		t.Errorf("after a restart: %+v, %v", got, err)
	}
}
