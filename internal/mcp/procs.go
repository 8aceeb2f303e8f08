package mcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Bounds of read_process_output.
const (
	defaultProcRead = 16 << 10
	maxProcRead     = 64 << 10
)

// ProcRef names a background process of a sandbox.
type ProcRef struct {
	DataRef
	PID int    `json:"pid,omitempty" jsonschema:"the process's pid, from exec_command background=true or list_processes"`
	Tag string `json:"tag,omitempty" jsonschema:"the process's tag, instead of pid"`
}

func (r ProcRef) ref() (string, error) {
	switch {
	case r.Tag != "" && r.PID != 0:
		return "", errors.New("give pid or tag, not both")
	case r.Tag != "":
		return r.Tag, nil
	case r.PID > 0:
		return strconv.Itoa(r.PID), nil
	}
	return "", errors.New("name the process: pid (from exec_command background=true or list_processes) or tag")
}

// startBackground starts in's command as a background process.
func (s *Server) startBackground(ctx context.Context, in execIn, token string) (ExecOut, error) {
	req := execRequest(in.CommandOpts)
	if in.CommandOpts.TimeoutSecs == 0 {
		req.TimeoutSecs = 0 // a server runs until it is stopped
	}
	if req.Stdin != "" {
		return ExecOut{}, errors.New("a background process takes no stdin up front: start it, then send input with write_process_stdin")
	}
	req.Shell, req.Args, req.Tag = in.Command, in.Args, in.Tag
	p, err := s.apiOf(ctx).StartProcess(ctx, in.SandboxID, token, req)
	if err != nil {
		return ExecOut{}, s.explain(ctx, err, in.SandboxID)
	}
	return ExecOut{
		SandboxID: in.SandboxID, PID: p.Pid, Tag: p.Tag,
		Note: fmt.Sprintf("started in the background as pid %d; read its output (stdout and stderr together) with read_process_output, "+
			"send it input with write_process_stdin, stop it with signal_process; list_processes shows it", p.Pid),
	}, nil
}

type listProcsIn struct {
	DataRef
	All bool `json:"all,omitempty" jsonschema:"also list the sandbox's other processes, with their command lines"`
}

type listProcsOut struct {
	Processes []apitype.ProcessInfo `json:"processes"`
}

func (s *Server) listProcesses(ctx context.Context, req *sdk.CallToolRequest, in listProcsIn) (*sdk.CallToolResult, listProcsOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, listProcsOut{}, err
	}
	procs, err := s.apiOf(ctx).Processes(ctx, in.SandboxID, token, in.All)
	if err != nil {
		return nil, listProcsOut{}, s.explain(ctx, err, in.SandboxID)
	}
	if procs == nil {
		procs = []apitype.ProcessInfo{}
	}
	return nil, listProcsOut{Processes: procs}, nil
}

type readProcIn struct {
	ProcRef
	Offset   int64 `json:"offset,omitempty" jsonschema:"the byte of the output to start at (stdout and stderr counted together); 0: the start, next_offset of the last read: what came since"`
	MaxBytes int64 `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes; default 16384, at most 65536"`
}

type readProcOut struct {
	PID        int                 `json:"pid"`
	Output     string              `json:"output" jsonschema:"stdout and stderr as the process wrote them; invalid UTF-8 is replaced"`
	Offset     int64               `json:"offset" jsonschema:"where output starts"`
	NextOffset int64               `json:"next_offset" jsonschema:"pass as offset to read on"`
	Lost       int64               `json:"lost,omitempty" jsonschema:"bytes before offset that the process's output buffer no longer holds"`
	Running    bool                `json:"running"`
	Exit       *apitype.ExitStatus `json:"exit,omitempty" jsonschema:"how it ended, once it has and all its output was read"`
	Truncated  bool                `json:"truncated,omitempty" jsonschema:"more output is there already; see note"`
	Note       string              `json:"note,omitempty"`
}

func (s *Server) readProcessOutput(ctx context.Context, req *sdk.CallToolRequest, in readProcIn) (*sdk.CallToolResult, readProcOut, error) {
	token, ref, err := s.procCall(req, in.ProcRef)
	if err != nil {
		return nil, readProcOut{}, err
	}
	limit := in.MaxBytes
	switch {
	case limit == 0:
		limit = defaultProcRead
	case limit < 0 || limit > maxProcRead:
		return nil, readProcOut{}, fmt.Errorf("max_bytes %d is not between 1 and %d", limit, maxProcRead)
	}
	if in.Offset < 0 {
		return nil, readProcOut{}, errors.New("offset must not be negative")
	}
	po, err := s.apiOf(ctx).ProcessOutput(ctx, in.SandboxID, token, ref, in.Offset, limit)
	if err != nil {
		return nil, readProcOut{}, s.explain(ctx, err, in.SandboxID)
	}
	p, err := s.apiOf(ctx).Process(ctx, in.SandboxID, token, ref)
	if err != nil {
		return nil, readProcOut{}, s.explain(ctx, err, in.SandboxID)
	}
	return procOutputResult(p, po)
}

// procOutputResult renders a read of a process's output for the model.
func procOutputResult(p apitype.ProcessInfo, po apitype.ProcessOutput) (*sdk.CallToolResult, readProcOut, error) {
	var b strings.Builder
	for _, c := range po.Chunks {
		b.Write(c.Bytes())
	}
	out := readProcOut{PID: p.Pid, Output: strings.ToValidUTF8(b.String(), string(utf8.RuneError)), Offset: po.Offset, NextOffset: po.NextOffset,
		Lost: po.Lost, Running: p.Status == apitype.ProcessRunning, Exit: po.Exit}
	var notes []string
	if po.Lost > 0 {
		notes = append(notes, fmt.Sprintf("%d bytes before offset %d were dropped from the process's output buffer", po.Lost, po.Offset))
	}
	if po.NextOffset < p.OutputSize {
		out.Truncated = true
		notes = append(notes, fmt.Sprintf("truncated, read more with offset %d (%d bytes of output so far)", po.NextOffset, p.OutputSize))
	} else if out.Running {
		notes = append(notes, fmt.Sprintf("still running: read again with offset %d for what it writes next", po.NextOffset))
	}
	out.Note = strings.Join(notes, "; ")
	var t strings.Builder
	fmt.Fprintf(&t, "pid %d: bytes %d-%d", p.Pid, po.Offset, po.NextOffset)
	switch {
	case po.Exit != nil && po.Exit.Signal != "":
		fmt.Fprintf(&t, ", ended by %s", po.Exit.Signal)
	case po.Exit != nil:
		fmt.Fprintf(&t, ", exited with code %d", po.Exit.ExitCode)
	case out.Running:
		t.WriteString(", running")
	}
	fmt.Fprintf(&t, "\n%s", out.Output)
	if out.Note != "" {
		fmt.Fprintf(&t, "\nnote: %s\n", out.Note)
	}
	return textResult(t.String()), out, nil
}

// procCall is the token and process reference of a call about a process.
func (s *Server) procCall(req *sdk.CallToolRequest, in ProcRef) (token, ref string, err error) {
	if token, err = s.token(req, in.DataRef); err != nil {
		return "", "", err
	}
	ref, err = in.ref()
	return token, ref, err
}

type stdinIn struct {
	ProcRef
	Data  string `json:"data,omitempty" jsonschema:"text to write to the process's stdin (include the newline a line needs)"`
	Close bool   `json:"close,omitempty" jsonschema:"close stdin after data, as end of input (EOF)"`
}

func (s *Server) writeProcessStdin(ctx context.Context, req *sdk.CallToolRequest, in stdinIn) (*sdk.CallToolResult, apitype.StdinResponse, error) {
	token, ref, err := s.procCall(req, in.ProcRef)
	if err != nil {
		return nil, apitype.StdinResponse{}, err
	}
	res, err := s.apiOf(ctx).WriteStdin(ctx, in.SandboxID, token, ref, strings.NewReader(in.Data), in.Close)
	if err != nil {
		return nil, apitype.StdinResponse{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, res, nil
}

type signalIn struct {
	ProcRef
	Signal string `json:"signal,omitempty" jsonschema:"TERM (the default), KILL, INT, HUP, or a number; sent to the process's whole group"`
}

func (s *Server) signalProcess(ctx context.Context, req *sdk.CallToolRequest, in signalIn) (*sdk.CallToolResult, apitype.ProcessInfo, error) {
	token, ref, err := s.procCall(req, in.ProcRef)
	if err != nil {
		return nil, apitype.ProcessInfo{}, err
	}
	sig := in.Signal
	if sig == "" {
		sig = "TERM"
	}
	p, err := s.apiOf(ctx).Signal(ctx, in.SandboxID, token, ref, sig)
	if err != nil {
		return nil, apitype.ProcessInfo{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, p, nil
}

// addProcTools registers the background process tools.
func (s *Server) addProcTools() {
	add(s, tool("list_processes", "List background processes",
		"List a sandbox's background processes (started with exec_command background=true): pid, tag, command, status, exit status once ended, and output size. all=true adds the sandbox's other processes with their command lines.",
		readOnly()), s.listProcesses)
	add(s, tool("read_process_output", "Read a background process's output",
		"Read a background process's output (stdout and stderr together, as written) from offset, at most max_bytes (default 16 KiB). Pass next_offset as offset to read what came after. Says whether it still runs, and its exit status once it ended; a slow reader is told how many bytes its buffer dropped.",
		readOnly()), s.readProcessOutput)
	add(s, tool("write_process_stdin", "Write to a background process's stdin",
		"Write text to a background process's standard input, e.g. an answer to a prompt; close=true closes it (EOF) after. Stdin that is closed already is an error.",
		hints{}), s.writeProcessStdin)
	add(s, tool("signal_process", "Signal a background process",
		"Send a signal (default TERM; KILL, INT, HUP or a number) to a background process and its children. A process that has exited is an error; read_process_output shows how it ended.",
		hints{destructive: true}), s.signalProcess)
}
