package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/internal/e2b/pb/process"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// keepaliveEvery is how often a quiet stream sends a keepalive, unless the
// client asks otherwise, so proxies and the SDK do not take a long silent
// command for a dead connection.
const keepaliveEvery = 30 * time.Second

// processService is process.Process over cove's background processes
// (pipes) and terminals (PTY).
type processService struct {
	s *Server
}

// sender serializes a server stream's sends between the event loop and the
// keepalive ticker.
type sender[T any] struct {
	mu   sync.Mutex
	send func(*T) error
}

func (s *sender[T]) Send(m *T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.send(m)
}

// keepalive sends ka every interval until ctx ends.
func keepalive[T any](ctx context.Context, every time.Duration, snd *sender[T], ka func() *T) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if snd.Send(ka()) != nil {
				return
			}
		}
	}
}

func startEvent(pid uint32) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}
}

func keepaliveEvent() *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}
}

func dataEvent(stream string, p []byte) *process.ProcessEvent {
	d := &process.ProcessEvent_DataEvent{}
	switch stream {
	case "stderr":
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: p}
	case "pty":
		d.Output = &process.ProcessEvent_DataEvent_Pty{Pty: p}
	default:
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: p}
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
}

// endEvent is how E2B's envd reports an end: the exit code (-1 for a
// signal), whether it exited on its own, and Go's ProcessState wording.
func endEvent(x apitype.ExitStatus) *process.ProcessEvent {
	e := &process.ProcessEvent_EndEvent{ExitCode: int32(x.ExitCode), Exited: x.Signal == ""}
	switch {
	case x.Signal != "":
		e.ExitCode = -1
		e.Status = "signal: " + signalWord(x.Signal)
	default:
		e.Status = "exit status " + strconv.Itoa(x.ExitCode)
	}
	if x.TimedOut {
		msg := "timed out"
		e.Error = &msg
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: e}}
}

// signalWord is Go's name for a signal in a ProcessState ("killed").
func signalWord(sig string) string {
	switch sig {
	case "SIGKILL":
		return "killed"
	case "SIGTERM":
		return "terminated"
	case "SIGINT":
		return "interrupt"
	case "SIGHUP":
		return "hangup"
	}
	return sig
}

// ref is the cove process reference of a selector: its pid or its tag.
func ref(sel *process.ProcessSelector) (string, error) {
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		return strconv.FormatUint(uint64(v.Pid), 10), nil
	case *process.ProcessSelector_Tag:
		if v.Tag == "" {
			break
		}
		return v.Tag, nil
	}
	return "", connect.NewError(connect.CodeInvalidArgument, errors.New("no process selected (pid or tag)"))
}

func (p *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	procs, err := t.c.Processes(ctx, t.id, t.token, false)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &process.ListResponse{}
	for _, pi := range procs {
		if pi.Status != apitype.ProcessRunning {
			continue
		}
		info := &process.ProcessInfo{Pid: uint32(pi.Pid), Config: &process.ProcessConfig{}}
		if len(pi.Cmd) > 0 {
			info.Config.Cmd, info.Config.Args = pi.Cmd[0], pi.Cmd[1:]
		}
		if pi.Cwd != "" {
			info.Config.Cwd = &pi.Cwd
		}
		if pi.Tag != "" {
			info.Tag = &pi.Tag
		}
		out.Processes = append(out.Processes, info)
	}
	out.Processes = append(out.Processes, p.s.ptys.list(t.id)...)
	return connect.NewResponse(out), nil
}

func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return err
	}
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	snd := &sender[process.StartResponse]{send: stream.Send}
	wrap := func(e *process.ProcessEvent) *process.StartResponse { return &process.StartResponse{Event: e} }
	if m.Pty != nil {
		return p.startPTY(ctx, t, m, func(e *process.ProcessEvent) error { return snd.Send(wrap(e)) })
	}
	info, err := t.c.StartProcess(ctx, t.id, t.token, apitype.ExecRequest{
		Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(), Cwd: cwdOf(cfg, t.user),
		User: t.user, Background: true, Tag: m.GetTag(),
	})
	if err != nil {
		if errors.Is(err, client.ErrConflict) {
			return connect.NewError(connect.CodeAlreadyExists, err)
		}
		return toConnect(err)
	}
	pid := strconv.Itoa(info.Pid)
	// stdin:false (0.3.0+ SDKs' default) is a process that reads EOF.
	if m.Stdin != nil && !*m.Stdin {
		if _, err := t.c.WriteStdin(ctx, t.id, t.token, pid, nil, true); err != nil && !errors.Is(err, client.ErrConflict) {
			return toConnect(err)
		}
	}
	if err := snd.Send(wrap(startEvent(uint32(info.Pid)))); err != nil {
		return err
	}
	return p.follow(ctx, t, pid, 0, func(e *process.ProcessEvent) error { return snd.Send(wrap(e)) }, func() error {
		return snd.Send(wrap(keepaliveEvent()))
	})
}

// cwdOf is where a command starts: as asked, else its user's home (envd's
// default), else cove's work directory.
func cwdOf(cfg *process.ProcessConfig, user string) string {
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		return *cfg.Cwd
	}
	return homeOf(user)
}

// follow streams a process's output from offset on as data events, then
// its end.
func (p *processService) follow(ctx context.Context, t target, pid string, offset int64, send func(*process.ProcessEvent) error, ka func() error) error {
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		tk := time.NewTicker(t.keepalive)
		defer tk.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-tk.C:
				if ka() != nil {
					return
				}
			}
		}
	}()
	err := t.c.FollowOutput(ctx, t.id, t.token, pid, offset, func(ev apitype.OutputEvent) error {
		if b := ev.Bytes(); len(b) > 0 {
			if err := send(dataEvent(ev.Stream, b)); err != nil {
				return err
			}
		}
		if ev.Exit != nil {
			return send(endEvent(*ev.Exit))
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil // the client went away; the process runs on, as under envd
	}
	return toConnect(err)
}

func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return err
	}
	snd := &sender[process.ConnectResponse]{send: stream.Send}
	send := func(e *process.ProcessEvent) error { return snd.Send(&process.ConnectResponse{Event: e}) }
	if pt := p.s.ptys.find(t.id, t.token, req.Msg.GetProcess()); pt != nil {
		return pt.attach(ctx, t.keepalive, send, func() error { return send(keepaliveEvent()) })
	}
	r, err := ref(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	info, err := t.c.Process(ctx, t.id, t.token, r)
	if err != nil {
		return toConnect(err)
	}
	if info.Status != apitype.ProcessRunning {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s is not running", r))
	}
	if err := send(startEvent(uint32(info.Pid))); err != nil {
		return err
	}
	// A connection sees what the process writes from now on, as envd's does.
	return p.follow(ctx, t, strconv.Itoa(info.Pid), info.OutputSize, send, func() error { return send(keepaliveEvent()) })
}

func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	pt := p.s.ptys.find(t.id, t.token, req.Msg.GetProcess())
	if pt == nil {
		r, err := ref(req.Msg.GetProcess())
		if err != nil {
			return nil, err
		}
		// Ask cove, which checks the token: a process without a terminal
		// cannot be resized.
		if _, err := t.c.Process(ctx, t.id, t.token, r); err != nil {
			return nil, toConnect(err)
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %s has no terminal", r))
	}
	if sz := req.Msg.GetPty().GetSize(); sz != nil {
		if err := pt.sess.Resize(int(sz.GetCols()), int(sz.GetRows())); err != nil {
			return nil, toConnect(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// input writes one ProcessInput to the selected process.
func (p *processService) input(ctx context.Context, t target, sel *process.ProcessSelector, in *process.ProcessInput) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		data = v.Stdin
	case *process.ProcessInput_Pty:
		data = v.Pty
	}
	if pt := p.s.ptys.find(t.id, t.token, sel); pt != nil {
		if _, err := pt.sess.Write(data); err != nil {
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("the terminal has ended: %w", err))
		}
		return nil
	}
	r, err := ref(sel)
	if err != nil {
		return err
	}
	if _, err := t.c.WriteStdin(ctx, t.id, t.token, r, bytes.NewReader(data), false); err != nil {
		return toConnect(err)
	}
	return nil
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := p.input(ctx, t, req.Msg.GetProcess(), req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	t, err := p.s.targetOf(ctx, stream.RequestHeader())
	if err != nil {
		return nil, err
	}
	var sel *process.ProcessSelector
	for stream.Receive() {
		switch v := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			sel = v.Start.GetProcess()
		case *process.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("data before the start event"))
			}
			if err := p.input(ctx, t, sel, v.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	sig := "TERM"
	if req.Msg.GetSignal() == process.Signal_SIGNAL_SIGKILL {
		sig = "KILL"
	}
	if pt := p.s.ptys.find(t.id, t.token, req.Msg.GetProcess()); pt != nil {
		pt.kill(sig)
		return connect.NewResponse(&process.SendSignalResponse{}), nil
	}
	r, err := ref(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := t.c.Signal(ctx, t.id, t.token, r, sig); err != nil {
		if errors.Is(err, client.ErrConflict) {
			// It has exited already: envd says the process is not found.
			return nil, connect.NewError(connect.CodeNotFound, err)
		}
		return nil, toConnect(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	t, err := p.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if pt := p.s.ptys.find(t.id, t.token, req.Msg.GetProcess()); pt != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("a terminal has no stdin to close: send Ctrl-D (0x04)"))
	}
	r, err := ref(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := t.c.WriteStdin(ctx, t.id, t.token, r, nil, true); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}
