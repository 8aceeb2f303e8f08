package envd

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"maps"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/internal/e2b/pb/process"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// A PTY process is one of cove's terminals (a WebSocket the facade holds
// open). cove does not report a terminal's pid, so each gets a handle in a
// range real pids do not reach, which Connect, SendInput, Update and
// SendSignal select it by.
const firstPTYPid = 1 << 22

// ptyTable holds the facade's open terminals by sandbox and handle.
type ptyTable struct {
	mu   sync.Mutex
	next uint32
	byID map[string]map[uint32]*ptyProc
}

func newPTYTable() *ptyTable {
	return &ptyTable{next: firstPTYPid, byID: map[string]map[uint32]*ptyProc{}}
}

// ptyProc is one terminal and the streams attached to its output.
type ptyProc struct {
	table *ptyTable
	sb    string
	pid   uint32
	tag   string
	token [32]byte // SHA-256 of the sandbox token that opened it
	cfg   *process.ProcessConfig
	sess  *client.TerminalSession

	mu     sync.Mutex
	subs   map[chan *process.ProcessEvent]struct{}
	ended  bool
	killed bool
}

// subBuffer is how many events a slow stream may fall behind before it is
// cut off, so one slow reader cannot stall the terminal for the others.
const subBuffer = 1024

func (t *ptyTable) add(sb, token, tag string, cfg *process.ProcessConfig, sess *client.TerminalSession) *ptyProc {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	p := &ptyProc{table: t, sb: sb, pid: t.next, tag: tag, token: sha256.Sum256([]byte(token)), cfg: cfg, sess: sess,
		subs: map[chan *process.ProcessEvent]struct{}{}}
	if t.byID[sb] == nil {
		t.byID[sb] = map[uint32]*ptyProc{}
	}
	t.byID[sb][p.pid] = p
	return p
}

func (t *ptyTable) remove(p *ptyProc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID[p.sb], p.pid)
	if len(t.byID[p.sb]) == 0 {
		delete(t.byID, p.sb)
	}
}

// find returns sandbox sb's terminal the selector names, or nil. No cove
// call checks the token of a call on a terminal the facade holds, so it
// must be the one that opened it: another token finds nothing, and its
// call goes on to cove, which refuses it.
func (t *ptyTable) find(sb, token string, sel *process.ProcessSelector) *ptyProc {
	p := t.lookup(sb, sel)
	if p == nil {
		return nil
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], p.token[:]) != 1 {
		return nil
	}
	return p
}

func (t *ptyTable) lookup(sb string, sel *process.ProcessSelector) *ptyProc {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		return t.byID[sb][v.Pid]
	case *process.ProcessSelector_Tag:
		for _, p := range t.byID[sb] {
			if v.Tag != "" && p.tag == v.Tag {
				return p
			}
		}
	}
	return nil
}

func (t *ptyTable) list(sb string) []*process.ProcessInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*process.ProcessInfo
	for _, p := range t.byID[sb] {
		info := &process.ProcessInfo{Pid: p.pid, Config: p.cfg}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out = append(out, info)
	}
	return out
}

func (t *ptyTable) closeAll() {
	t.mu.Lock()
	var all []*ptyProc
	for _, m := range t.byID {
		for _, p := range m {
			all = append(all, p)
		}
	}
	t.mu.Unlock()
	for _, p := range all {
		p.sess.Close()
	}
}

// subscribe adds a stream; its channel closes after the end event.
func (p *ptyProc) subscribe() (chan *process.ProcessEvent, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil, false
	}
	ch := make(chan *process.ProcessEvent, subBuffer)
	p.subs[ch] = struct{}{}
	return ch, true
}

func (p *ptyProc) unsubscribe(ch chan *process.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[ch]; ok {
		delete(p.subs, ch)
		close(ch)
	}
}

func (p *ptyProc) broadcast(e *process.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range maps.Clone(p.subs) {
		select {
		case ch <- e:
		default: // too slow: cut off
			delete(p.subs, ch)
			close(ch)
		}
	}
}

// run copies the terminal's output to the streams until it ends, then
// sends its end and forgets it.
func (p *ptyProc) run() {
	buf := make([]byte, 32<<10)
	for {
		n, err := p.sess.Read(buf)
		if n > 0 {
			p.broadcast(dataEvent("pty", append([]byte(nil), buf[:n]...)))
		}
		if err != nil {
			break
		}
	}
	st, err := p.sess.Wait()
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if err != nil {
		// A hang-up (kill) ends the WebSocket before any exit record.
		st = apitype.ExitStatus{ExitCode: -1, Signal: "SIGKILL"}
		if !killed && !errors.Is(err, io.EOF) {
			st.Signal = "SIGHUP"
		}
	}
	p.sess.Close()
	p.table.remove(p)
	p.broadcast(endEvent(st))
	p.mu.Lock()
	p.ended = true
	for ch := range p.subs {
		close(ch)
	}
	p.subs = nil
	p.mu.Unlock()
}

// kill ends the terminal: TERM to its foreground group, KILL by hanging it
// up (SIGHUP to its session, SIGKILL after 2 s).
func (p *ptyProc) kill(sig string) {
	if sig != "KILL" {
		p.sess.Signal(sig)
		return
	}
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.sess.Signal("KILL")
	p.sess.Close()
}

// attach streams the terminal's events from now on to send: start first,
// then output, then its end.
func (p *ptyProc) attach(ctx context.Context, every time.Duration, send func(*process.ProcessEvent) error, ka func() error) error {
	ch, ok := p.subscribe()
	if !ok {
		return connect.NewError(connect.CodeNotFound, errors.New("the terminal has ended"))
	}
	return p.pump(ctx, every, ch, send, ka)
}

func (p *ptyProc) pump(ctx context.Context, every time.Duration, ch chan *process.ProcessEvent, send func(*process.ProcessEvent) error, ka func() error) error {
	defer p.unsubscribe(ch)
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
			if err := ka(); err != nil {
				return err
			}
		case e, ok := <-ch:
			if !ok {
				return nil
			}
			if err := send(e); err != nil {
				return err
			}
		}
	}
}

// startPTY opens a terminal for a Start with a pty and streams it.
func (ps *processService) startPTY(ctx context.Context, t target, m *process.StartRequest, send func(*process.ProcessEvent) error) error {
	cfg := m.GetProcess()
	if m.GetTag() != "" {
		if ps.s.ptys.lookup(t.id, &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: m.GetTag()}}) != nil {
			return connect.NewError(connect.CodeAlreadyExists, errors.New("a terminal with tag "+strconv.Quote(m.GetTag())+" runs already"))
		}
	}
	sz := m.GetPty().GetSize()
	sess, err := t.c.Terminal(ctx, t.id, t.token, client.TerminalOptions{
		Cols: int(sz.GetCols()), Rows: int(sz.GetRows()), User: t.user, Cwd: cwdOf(cfg, t.user),
		Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(),
	})
	if err != nil {
		return toConnect(err)
	}
	p := ps.s.ptys.add(t.id, t.token, m.GetTag(), cfg, sess)
	ch, _ := p.subscribe() // before run, so the first output reaches the starter
	go p.run()
	return p.pump(ctx, t.keepalive, ch, send, func() error { return send(keepaliveEvent()) })
}
