package mcp

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fakeProc is a background process of the fake: it prints its shell
// command, then echoes its stdin, as `echo CMD; cat` would.
type fakeProc struct {
	sandbox string
	info    apitype.ProcessInfo
	out     string
}

func (f *fakeAPI) proc(id, token, ref string) (*fakeProc, error) {
	if _, err := f.open(id, token); err != nil {
		return nil, err
	}
	for _, p := range f.procs {
		if p.sandbox == id && (p.info.Tag == ref || strconv.Itoa(p.info.Pid) == ref) {
			return p, nil
		}
	}
	return nil, notFound("process " + ref)
}

func (f *fakeAPI) StartProcess(ctx context.Context, id, token string, req apitype.ExecRequest) (apitype.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return apitype.ProcessInfo{}, err
	}
	req.Background = true
	f.execs = append(f.execs, req)
	cmd := req.Args
	if cmd == nil {
		cmd = []string{"/bin/sh", "-c", req.Shell}
	}
	p := &fakeProc{sandbox: id, out: req.Shell + "\n", info: apitype.ProcessInfo{Pid: 4242 + len(f.procs), Tag: req.Tag,
		Cmd: cmd, Status: apitype.ProcessRunning, StdinOpen: true, Cove: true}}
	p.info.OutputSize = int64(len(p.out))
	f.procs = append(f.procs, p)
	return p.info, nil
}

func (f *fakeAPI) Processes(ctx context.Context, id, token string, all bool) ([]apitype.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.open(id, token); err != nil {
		return nil, err
	}
	var out []apitype.ProcessInfo
	for _, p := range f.procs {
		if p.sandbox == id {
			out = append(out, p.info)
		}
	}
	return out, nil
}

func (f *fakeAPI) Process(ctx context.Context, id, token, ref string) (apitype.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, token, ref)
	if err != nil {
		return apitype.ProcessInfo{}, err
	}
	return p.info, nil
}

func (f *fakeAPI) ProcessOutput(ctx context.Context, id, token, ref string, offset, limit int64) (apitype.ProcessOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, token, ref)
	if err != nil {
		return apitype.ProcessOutput{}, err
	}
	start := min(offset, int64(len(p.out)))
	end := min(int64(len(p.out)), start+limit)
	out := apitype.ProcessOutput{Offset: start, NextOffset: end}
	if end > start {
		out.Chunks = []apitype.OutputEvent{{Stream: "stdout", Offset: start, Data: p.out[start:end]}}
	}
	if end == int64(len(p.out)) {
		out.Exit = p.info.Exit
	}
	return out, nil
}

func (f *fakeAPI) WriteStdin(ctx context.Context, id, token, ref string, r io.Reader, closeAfter bool) (apitype.StdinResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, token, ref)
	if err != nil {
		return apitype.StdinResponse{}, err
	}
	if !p.info.StdinOpen {
		return apitype.StdinResponse{}, conflict("stdin is closed")
	}
	b, _ := io.ReadAll(r)
	p.out += string(b)
	p.info.OutputSize = int64(len(p.out))
	if closeAfter {
		p.info.StdinOpen = false
		p.info.Status, p.info.Exit = apitype.ProcessExited, &apitype.ExitStatus{}
	}
	return apitype.StdinResponse{Written: int64(len(b)), Closed: closeAfter}, nil
}

func (f *fakeAPI) Signal(ctx context.Context, id, token, ref, sig string) (apitype.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, token, ref)
	if err != nil {
		return apitype.ProcessInfo{}, err
	}
	if p.info.Status != apitype.ProcessRunning {
		return apitype.ProcessInfo{}, conflict("process has exited")
	}
	p.info.Status, p.info.StdinOpen = apitype.ProcessExited, false
	p.info.Exit = &apitype.ExitStatus{ExitCode: -1, Signal: "SIG" + strings.TrimPrefix(sig, "SIG")}
	return p.info, nil
}

func TestProcessTools(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", nil, false))

	res := call(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "command": "python3 -m http.server", "background": true, "tag": "web"}, false)
	out := decode[ExecOut](t, res)
	if out.PID != 4242 || out.Tag != "web" || !strings.Contains(out.Note, "read_process_output") {
		t.Fatalf("background: %+v", out)
	}
	if got := f.lastExec(); !got.Background || got.Shell != "python3 -m http.server" || got.TimeoutSecs != 0 || got.Tag != "web" {
		t.Errorf("start request %+v: want background, the shell, no timeout", got)
	}
	call(t, cs, "exec_command", map[string]any{"sandbox_id": sb.ID, "command": "cat", "background": true, "stdin": "x"}, true)

	list := decode[listProcsOut](t, call(t, cs, "list_processes", map[string]any{"sandbox_id": sb.ID}, false))
	if len(list.Processes) != 1 || list.Processes[0].Tag != "web" {
		t.Errorf("list_processes: %+v", list)
	}
	call(t, cs, "write_process_stdin", map[string]any{"sandbox_id": sb.ID, "pid": 4242, "data": "0123456789"}, false)

	// A read capped short says where to go on.
	res = call(t, cs, "read_process_output", map[string]any{"sandbox_id": sb.ID, "tag": "web", "max_bytes": 10}, false)
	ro := decode[readProcOut](t, res)
	if ro.Output != "python3 -m" || !ro.Truncated || ro.NextOffset != 10 || !strings.Contains(ro.Note, "truncated, read more with offset 10") || !ro.Running {
		t.Errorf("read_process_output: %+v", ro)
	}
	ro = decode[readProcOut](t, call(t, cs, "read_process_output", map[string]any{"sandbox_id": sb.ID, "tag": "web", "offset": 10}, false))
	if ro.Output != " http.server\n0123456789" || ro.Truncated {
		t.Errorf("read on: %+v", ro)
	}

	call(t, cs, "signal_process", map[string]any{"sandbox_id": sb.ID, "pid": 4242}, false)
	ro = decode[readProcOut](t, call(t, cs, "read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": 4242, "offset": ro.NextOffset}, false))
	if ro.Running || ro.Exit == nil || ro.Exit.Signal != "SIGTERM" {
		t.Errorf("after TERM: %+v", ro)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"signal_process", map[string]any{"sandbox_id": sb.ID, "pid": 4242}},
		{"write_process_stdin", map[string]any{"sandbox_id": sb.ID, "pid": 4242, "data": "x"}},
		{"read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": 1}},
		{"read_process_output", map[string]any{"sandbox_id": sb.ID}},
		{"read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": 4242, "max_bytes": maxProcRead + 1}},
	} {
		if res := call(t, cs, tc.tool, tc.args, true); text(res) == "" {
			t.Errorf("%s %v: an error without words", tc.tool, tc.args)
		}
	}
}
