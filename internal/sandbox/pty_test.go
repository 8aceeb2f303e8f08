package sandbox

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestTerminal drives a terminal through the service to a real agent.
func TestTerminal(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	for name, req := range map[string]TerminalRequest{
		"zero cols":   {Cols: 0, Rows: 24},
		"huge rows":   {Cols: 80, Rows: MaxTerminalRows + 1},
		"bad env":     {Cols: 80, Rows: 24, Env: []string{"NOEQUALS"}},
		"bad command": {Cols: 80, Rows: 24, Args: []string{"no-such-command-cove"}},
	} {
		if _, err := sb.OpenTerminal(ctx, req); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}

	term, err := sb.OpenTerminal(ctx, TerminalRequest{Cols: 80, Rows: 24, Cwd: "/",
		Args: []string{"sh", "-c", "read x; stty size; echo got=$x; exit 4"}})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if err := term.Resize(0, 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("Resize(0, 10): %v, want ErrInvalid", err)
	}
	if err := term.Signal("NOPE"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Signal(NOPE): %v, want ErrInvalid", err)
	}
	if err := term.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := term.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(term)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, "30 100") || !strings.Contains(s, "got=hi") {
		t.Errorf("output %q; want the new size and the line read", s)
	}
	if ex, ok := term.Exit(); !ok || ex.ExitCode != 4 {
		t.Errorf("exit %+v, %v; want 4", ex, ok)
	}
}
