package sandbox

import (
	"errors"
	"testing"
)

func TestExecStream(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	var order []string
	got := map[string]string{}
	st, err := sb.ExecStream(ctx, ExecRequest{Shell: "echo out; echo err >&2; exit 4"}, func(stream string, p []byte) error {
		order = append(order, stream)
		got[stream] += string(p)
		return nil
	})
	if err != nil || st.ExitCode != 4 || st.Signal != "" {
		t.Fatalf("ExecStream = %+v, %v", st, err)
	}
	if got["stdout"] != "out\n" || got["stderr"] != "err\n" {
		t.Errorf("output = %q", got)
	}
	if n := e.svc.Stats().Execs.Load(); n != 1 {
		t.Errorf("Stats().Execs = %d, want 1", n)
	}

	// The caller's error comes back as it is, not as the sandbox's.
	stop := errors.New("client gone")
	if _, err := sb.ExecStream(ctx, ExecRequest{Shell: "while :; do echo x; done"}, func(string, []byte) error { return stop }); err != stop {
		t.Errorf("ExecStream with a failing out = %v, want %v", err, stop)
	}

	// Bad input is refused before anything runs.
	_, err = sb.ExecStream(ctx, ExecRequest{}, func(string, []byte) error { return nil })
	wantErr(t, err, ErrInvalid)
	_, err = sb.ExecStream(ctx, ExecRequest{Args: []string{"true"}, User: "nobody-here"}, func(string, []byte) error { return nil })
	wantErr(t, err, ErrInvalid)
}
