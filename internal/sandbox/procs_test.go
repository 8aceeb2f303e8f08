package sandbox

import (
	"strings"
	"testing"
)

// TestProcesses runs a background process through the service to a real
// agent: start, poll, stdin, follow to the end, and the sentinels.
func TestProcesses(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	p, err := sb.StartProcess(ctx, ProcessRequest{Args: []string{"cat"}, Tag: "echoer"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Running || p.User != RootUser || p.Pid == 0 {
		t.Fatalf("started %+v", p)
	}
	ref := ProcessRef{Tag: "echoer"}
	if n, err := sb.WriteStdin(ctx, ref, strings.NewReader("hello "), false); err != nil || n != 6 {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	if _, err := sb.WriteStdin(ctx, ref, strings.NewReader("world"), true); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var last OutputEvent
	err = sb.FollowOutput(ctx, ref, 0, func(ev OutputEvent) error {
		out.Write(ev.Data)
		last = ev
		return nil
	})
	if err != nil || out.String() != "hello world" || !last.Done || last.Exit == nil || last.Exit.ExitCode != 0 {
		t.Fatalf("followed %q, last %+v, %v", out.String(), last, err)
	}
	read, err := sb.ProcessOutput(ctx, ProcessRef{Pid: p.Pid}, 6, 3)
	if err != nil || len(read.Chunks) != 1 || string(read.Chunks[0].Data) != "wor" || read.Offset != 6 || read.NextOffset != 9 || read.Exit != nil {
		t.Errorf("ProcessOutput(6, 3) = %+v, %v", read, err)
	}
	read, err = sb.ProcessOutput(ctx, ref, 9, 0)
	if err != nil || read.NextOffset != 11 || read.Exit == nil {
		t.Errorf("ProcessOutput(9) = %+v, %v; want the rest and the exit", read, err)
	}
	list, err := sb.Processes(ctx, false)
	if err != nil || len(list) != 1 || list[0].Tag != "echoer" || list[0].OutputSize != 11 {
		t.Errorf("Processes = %+v, %v", list, err)
	}

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"unknown pid", func() error { _, err := sb.Process(ctx, ProcessRef{Pid: 1 << 30}); return err }, ErrProcessNotFound},
		{"signal an exited process", func() error { _, err := sb.Signal(ctx, ref, "TERM"); return err }, ErrProcessState},
		{"stdin to a closed stdin", func() error { _, err := sb.WriteStdin(ctx, ref, strings.NewReader("x"), false); return err }, ErrProcessState},
		{"bad signal", func() error { _, err := sb.Signal(ctx, ref, "NOPE"); return err }, ErrInvalid},
		{"a numeric tag", func() error {
			_, err := sb.StartProcess(ctx, ProcessRequest{Shell: "true", Tag: "9"})
			return err
		}, ErrInvalid},
		{"limit over the bound", func() error { _, err := sb.ProcessOutput(ctx, ref, 0, MaxOutputRead+1); return err }, ErrInvalid},
		{"unknown command", func() error {
			_, err := sb.StartProcess(ctx, ProcessRequest{Args: []string{"no-such-command-here"}})
			return err
		}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.call(), tc.want) })
	}
}

func TestParseProcessRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ProcessRef
		ok   bool
	}{
		{"42", ProcessRef{Pid: 42}, true},
		{"web", ProcessRef{Tag: "web"}, true},
		{"0", ProcessRef{}, false},
		{"-3", ProcessRef{}, false},
		{"", ProcessRef{}, false},
		{"a b", ProcessRef{}, false},
	} {
		got, err := ParseProcessRef(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseProcessRef(%q) = %+v, %v; want %+v ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
