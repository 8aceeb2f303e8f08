package agent

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// driverSource is the Python side of the interpreter protocol.
//
//go:embed driver.py
var driverSource string

// errInterpExited reports that the interpreter died during a call.
var errInterpExited = errors.New("python interpreter exited")

// interpRequest is one line sent to the driver.
type interpRequest struct {
	Op    string `json:"op"` // "eval", "reseed" or "ping"
	Code  string `json:"code,omitempty"`
	Limit int    `json:"limit,omitempty"` // bytes kept of each output stream
}

// interpResponse is one line received from the driver.
type interpResponse struct {
	Result    string `json:"result"`
	Error     string `json:"error"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
}

// interp is one running Python interpreter and the driver inside it.
type interp struct {
	cmd    *exec.Cmd
	req    *os.File      // write end of the request pipe (the driver's fd 3)
	resp   *os.File      // read end of the response pipe (the driver's fd 4)
	lines  chan []byte   // response lines; closed at the pipe's end
	exited chan struct{} // closed once the process has been waited for
	stderr *tailBuffer   // what the interpreter itself wrote to fd 2
}

// startInterp starts python running the driver, with attr (its own
// process group).
func startInterp(python, dir string, env []string, attr *syscall.SysProcAttr) (_ *interp, err error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	defer func() {
		// The child has its own copies of these ends.
		reqR.Close()
		respW.Close()
		if err != nil {
			reqW.Close()
			respR.Close()
		}
	}()
	p := &interp{
		req:    reqW,
		resp:   respR,
		lines:  make(chan []byte, 1), // one answer can be waiting when a kill races it
		exited: make(chan struct{}),
		stderr: &tailBuffer{max: 4 << 10},
	}
	p.cmd = exec.Command(python, "-c", driverSource)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.ExtraFiles = []*os.File{reqR, respW} // fds 3 and 4
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = attr
	// Commands started by user code may hold stderr open after a kill.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", python, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	go p.readLines()
	return p, nil
}

func (p *interp) readLines() {
	defer close(p.lines)
	r := bufio.NewReader(p.resp)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		p.lines <- line
	}
}

// call sends one request and waits for its answer. When ctx ends first,
// the interpreter is killed: there is no other way to stop user code.
func (p *interp) call(ctx context.Context, req interpRequest) (interpResponse, error) {
	var resp interpResponse
	stop := context.AfterFunc(ctx, p.kill)
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	if _, err := p.req.Write(append(b, '\n')); err != nil {
		return resp, p.failure(ctx)
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			return resp, p.failure(ctx)
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			p.kill() // out of step with the driver: it cannot be trusted again
			return resp, fmt.Errorf("python driver: bad answer: %w", err)
		}
		return resp, nil
	case <-p.exited:
		return resp, p.failure(ctx)
	}
}

// failure explains why a call got no answer.
func (p *interp) failure(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return errInterpExited
}

// running reports whether the process has not exited.
func (p *interp) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill kills the interpreter's process group and closes the pipes, which
// also unblocks the reader if a forked child still holds the other end.
// Once the process has been reaped its group is left alone: the id could
// name someone else's group by now.
func (p *interp) kill() {
	if p.running() {
		killGroup(p.cmd.Process.Pid)
	}
	p.req.Close()
	p.resp.Close()
}

// status describes how the process ended, once it has.
func (p *interp) status() string {
	<-p.exited
	if p.cmd.ProcessState == nil {
		return "unknown status"
	}
	return p.cmd.ProcessState.String()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
