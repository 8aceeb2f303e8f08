// Package runtimetest provides a fake runtime.Runtime and image resolver
// for tests of the packages above the runtime. It is for tests only: the
// fake isolates nothing.
package runtimetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agent"
	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Fake is a runtime.Runtime without any isolation: a "sandbox" is an
// in-process agent.Agent with its own work directory, reached over a
// net.Pipe. Absolute paths in exec still reach the host, so tests use
// relative paths only.
//
// Besides the Runtime methods it injects failures and records what
// happened; all its methods are safe while the code under test runs.
type Fake struct {
	dir string // parent of the sandboxes' work directories

	wg sync.WaitGroup // agent connections being served

	mu    sync.Mutex
	boxes map[string]*box
	// Failure injection, by 1-based call number.
	failStart    map[int]error
	deafStart    map[int]bool // the sandbox starts but its agent never answers
	dieStart     map[int]bool // the sandbox starts but exits before its agent answers
	failRestore  map[int]error
	restoreDelay time.Duration
	failCkpt     map[int]error // the checkpoint writes a partial image, then fails
	version      string
	hold         chan struct{} // when set, Start waits for it to close
	holdDials    chan struct{} // when set, Dial waits for it to close
	waitErr      error         // when set, Wait fails with it
	// What happened.
	starts       int
	restores     int
	ckptCalls    int
	specs        map[string]runtime.Spec
	restoredFrom map[string]string   // id -> image dir
	restoredReq  map[string][]string // id -> SandboxIDs passed to the agent's Restored
	warmed       map[string]int      // id -> agent Warm calls
	checkpoints  []Checkpoint
	destroyed    []string
	dialsHeld    int // Dials waiting on holdDials
}

// Checkpoint records one call of Fake.Checkpoint.
type Checkpoint struct {
	ID, Image    string
	LeaveRunning bool
}

type box struct {
	id      string
	workDir string
	agent   *agent.Agent
	ctx     context.Context
	cancel  context.CancelFunc // ends every connection to the agent
	deaf    bool               // Dial fails: the agent does not answer
	exited  bool               // Dial fails with runtime.ErrExited
	conns   []net.Conn         // agent ends of the connections
	// gone is closed when the sandbox's "process" ends; exit says how.
	gone chan struct{}
	exit runtime.Exit
}

var _ runtime.Runtime = (*Fake)(nil)

// New returns a Fake whose sandboxes live in a temporary directory of t's
// and are all stopped when t ends.
func New(t testing.TB) *Fake {
	t.Helper()
	rt := &Fake{
		dir:          t.TempDir(),
		boxes:        map[string]*box{},
		failStart:    map[int]error{},
		deafStart:    map[int]bool{},
		dieStart:     map[int]bool{},
		failRestore:  map[int]error{},
		failCkpt:     map[int]error{},
		specs:        map[string]runtime.Spec{},
		restoredFrom: map[string]string{},
		restoredReq:  map[string][]string{},
		warmed:       map[string]int{},
	}
	t.Cleanup(rt.shutdown)
	return rt
}

// fakeAgent is the agent with Warm and Restored recorded. Warm does not
// start a Python interpreter: tests have no use for one.
type fakeAgent struct {
	*agent.Agent
	rt *Fake
	id string
}

func (a *fakeAgent) Warm(ctx context.Context) error {
	a.rt.mu.Lock()
	a.rt.warmed[a.id]++
	a.rt.mu.Unlock()
	return nil
}

func (a *fakeAgent) Restored(ctx context.Context, req agentproto.RestoredRequest) error {
	a.rt.mu.Lock()
	a.rt.restoredReq[a.id] = append(a.rt.restoredReq[a.id], req.SandboxID)
	a.rt.mu.Unlock()
	return a.Agent.Restored(ctx, req)
}

func (rt *Fake) Name() string { return "fake" }

func (rt *Fake) Version(ctx context.Context) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.version == "" {
		return "fake 1"
	}
	return rt.version
}

// SetVersion changes what Version reports, as an upgrade of runsc would.
func (rt *Fake) SetVersion(v string) {
	rt.mu.Lock()
	rt.version = v
	rt.mu.Unlock()
}

// bootLocked makes a running sandbox. The caller holds rt.mu.
func (rt *Fake) bootLocked(id string) (*box, error) {
	if _, ok := rt.boxes[id]; ok {
		return nil, fmt.Errorf("fake: sandbox %s exists", id)
	}
	dir := filepath.Join(rt.dir, id)
	ctx, cancel := context.WithCancel(context.Background())
	b := &box{id: id, workDir: dir, ctx: ctx, cancel: cancel, gone: make(chan struct{}),
		agent: agent.New(agent.Config{WorkDir: dir, ProcDir: dir + ".procs", Hostname: func() (string, error) { return id, nil }})}
	rt.boxes[id] = b
	return b, nil
}

// Boot makes a running sandbox the code under test knows nothing about,
// as an earlier daemon would have left it.
func (rt *Fake) Boot(t testing.TB, id string) {
	t.Helper()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, err := rt.bootLocked(id); err != nil {
		t.Fatal(err)
	}
}

func (rt *Fake) Start(ctx context.Context, spec runtime.Spec) error {
	rt.mu.Lock()
	rt.starts++
	n, hold := rt.starts, rt.hold
	rt.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.failStart[n]; err != nil {
		return err
	}
	b, err := rt.bootLocked(spec.ID)
	if err != nil {
		return err
	}
	b.deaf = rt.deafStart[n]
	if rt.dieStart[n] {
		b.end(runtime.Exit{})
	}
	rt.specs[spec.ID] = spec
	return nil
}

func (rt *Fake) Restore(ctx context.Context, spec runtime.Spec, image string) error {
	rt.mu.Lock()
	delay := rt.restoreDelay
	rt.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(delay):
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.restores++
	if err := rt.failRestore[rt.restores]; err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return fmt.Errorf("fake: restore %s: %w", spec.ID, err)
	}
	if _, err := rt.bootLocked(spec.ID); err != nil {
		return err
	}
	rt.specs[spec.ID] = spec
	rt.restoredFrom[spec.ID] = image
	return nil
}

func (rt *Fake) Dial(ctx context.Context, id string) (net.Conn, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for hold := rt.holdDials; hold != nil; hold = rt.holdDials {
		rt.dialsHeld++
		rt.mu.Unlock()
		select {
		case <-hold:
		case <-ctx.Done():
		}
		rt.mu.Lock()
		rt.dialsHeld--
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	b := rt.boxes[id]
	if b == nil {
		return nil, fmt.Errorf("fake: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	if b.exited {
		return nil, fmt.Errorf("fake: sandbox %s: %w", id, runtime.ErrExited)
	}
	if b.deaf || b.ctx.Err() != nil {
		return nil, fmt.Errorf("fake: sandbox %s: connection refused", id)
	}
	host, guest := net.Pipe()
	b.conns = append(b.conns, guest)
	h := &fakeAgent{Agent: b.agent, rt: rt, id: id}
	rt.wg.Go(func() { agentproto.ServeConn(b.ctx, guest, h) })
	return host, nil
}

// Netns implements runtime.Runtime: a name no namespace has, since the
// fake makes none.
func (rt *Fake) Netns(id string) string { return "cove-" + id + "-fake" }

func (rt *Fake) Destroy(ctx context.Context, id string) error {
	rt.mu.Lock()
	b := rt.boxes[id]
	delete(rt.boxes, id)
	rt.destroyed = append(rt.destroyed, id)
	rt.mu.Unlock()
	if b != nil {
		b.stop()
		os.RemoveAll(b.workDir)
	}
	return nil
}

// Wait implements runtime.Runtime.
func (rt *Fake) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	rt.mu.Lock()
	b, err := rt.boxes[id], rt.waitErr
	rt.mu.Unlock()
	switch {
	case err != nil:
		return runtime.Exit{}, err
	case b == nil:
		return runtime.Exit{}, fmt.Errorf("fake: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	select {
	case <-b.gone:
		return b.exit, nil
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
}

// stop ends the sandbox: its agent, every connection to it and its
// "process".
func (b *box) stop() {
	b.cancel()
	for _, c := range b.conns {
		c.Close()
	}
	b.agent.Close()
	b.end(runtime.Exit{})
}

// end marks the sandbox's process gone, once; Dial then fails with
// runtime.ErrExited. The caller holds rt.mu or owns b.
func (b *box) end(ex runtime.Exit) {
	select {
	case <-b.gone:
	default:
		b.exited = true
		b.exit = ex
		close(b.gone)
	}
}

func (rt *Fake) Checkpoint(ctx context.Context, id, image string, leaveRunning bool) (time.Duration, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.boxes[id]
	if b == nil || b.ctx.Err() != nil {
		return 0, fmt.Errorf("fake: checkpoint %s: %w", id, runtime.ErrNotFound)
	}
	if err := os.MkdirAll(image, 0o700); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(image, "checkpoint.img"), []byte(id), 0o600); err != nil {
		return 0, err
	}
	rt.ckptCalls++
	if err := rt.failCkpt[rt.ckptCalls]; err != nil {
		return 0, fmt.Errorf("fake: checkpoint %s: %w", id, err) // the sandbox runs on
	}
	rt.checkpoints = append(rt.checkpoints, Checkpoint{ID: id, Image: image, LeaveRunning: leaveRunning})
	if !leaveRunning {
		// The sandbox stops; its resources stay until Destroy.
		b.cancel()
		for _, c := range b.conns {
			c.Close()
		}
		b.end(runtime.Exit{})
	}
	return 3 * time.Millisecond, nil
}

// Close implements runtime.Runtime: the sandboxes run on until the test
// ends.
func (rt *Fake) Close() error { return nil }

func (rt *Fake) List(ctx context.Context) ([]string, error) {
	return rt.IDs(), nil
}

// IDs returns the ids of every sandbox the runtime holds, sorted.
func (rt *Fake) IDs() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ids := make([]string, 0, len(rt.boxes))
	for id := range rt.boxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// WorkDir returns the work directory of sandbox id's agent.
func (rt *Fake) WorkDir(id string) string { return filepath.Join(rt.dir, id) }

// SetDeaf makes a sandbox's agent stop answering new connections.
func (rt *Fake) SetDeaf(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.boxes[id].deaf = true
}

// DropConns cuts every connection to a sandbox's agent, as a network
// hiccup would; new ones can still be made.
func (rt *Fake) DropConns(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, c := range rt.boxes[id].conns {
		c.Close()
	}
	rt.boxes[id].conns = nil
}

// Kill ends a sandbox's process as a crash or an OOM kill would: the
// agent and its connections go and Wait returns ex; what it holds stays
// until Destroy.
func (rt *Fake) Kill(id string, ex runtime.Exit) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.boxes[id]
	b.cancel()
	for _, c := range b.conns {
		c.Close()
	}
	b.end(ex)
}

// FailWaits makes every Wait from now fail with err, as a runtime that
// cannot watch its sandboxes; nil undoes it.
func (rt *Fake) FailWaits(err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.waitErr = err
}

// HoldDials makes every Dial wait until the returned function is called
// (or its context ends).
func (rt *Fake) HoldDials() (release func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ch := make(chan struct{})
	rt.holdDials = ch
	return sync.OnceFunc(func() {
		rt.mu.Lock()
		rt.holdDials = nil
		rt.mu.Unlock()
		close(ch)
	})
}

// DialsHeld returns how many Dials are waiting on HoldDials.
func (rt *Fake) DialsHeld() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.dialsHeld
}

// Starts returns how many times Start was called.
func (rt *Fake) Starts() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.starts
}

// Restores returns how many times Restore was called.
func (rt *Fake) Restores() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.restores
}

// Spec returns the spec sandbox id was last started or restored with.
func (rt *Fake) Spec(id string) runtime.Spec {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.specs[id]
}

// RestoredFrom returns the image a sandbox was restored from.
func (rt *Fake) RestoredFrom(id string) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.restoredFrom[id]
}

// RestoredCalls returns the ids a sandbox's agent was given by Restored.
func (rt *Fake) RestoredCalls(id string) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.restoredReq[id])
}

// Warms returns how many times a sandbox's agent was asked to warm.
func (rt *Fake) Warms(id string) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.warmed[id]
}

// Checkpoints returns every Checkpoint call that succeeded, in order.
func (rt *Fake) Checkpoints() []Checkpoint {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.checkpoints)
}

// Destroyed reports whether Destroy was called for id.
func (rt *Fake) Destroyed(id string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Contains(rt.destroyed, id)
}

// HoldStarts makes every Start wait until the returned function is called.
func (rt *Fake) HoldStarts() (release func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ch := make(chan struct{})
	rt.hold = ch
	return sync.OnceFunc(func() {
		rt.mu.Lock()
		rt.hold = nil
		rt.mu.Unlock()
		close(ch)
	})
}

// FailNthStart makes the nth Start from now fail with err.
func (rt *Fake) FailNthStart(n int, err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.failStart[rt.starts+n] = err
}

// DeafNthStart makes the nth Start from now boot a sandbox whose agent
// never answers.
func (rt *Fake) DeafNthStart(n int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.deafStart[rt.starts+n] = true
}

// DieNthStart makes the nth Start from now boot a sandbox that exits
// before its agent answers.
func (rt *Fake) DieNthStart(n int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.dieStart[rt.starts+n] = true
}

// FailNthCheckpoint makes the nth Checkpoint from now fail with err once
// it has written part of its image, as a disk that fills up does.
func (rt *Fake) FailNthCheckpoint(n int, err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.failCkpt[rt.ckptCalls+n] = err
}

// SetRestoreDelay makes every Restore take d, as a real one under load
// does; a Restore whose ctx ends first fails.
func (rt *Fake) SetRestoreDelay(d time.Duration) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.restoreDelay = d
}

// FailNthRestore makes the nth Restore from now fail with err.
func (rt *Fake) FailNthRestore(n int, err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.failRestore[rt.restores+n] = err
}

func (rt *Fake) shutdown() {
	rt.mu.Lock()
	boxes := rt.boxes
	rt.boxes = map[string]*box{}
	rt.mu.Unlock()
	for _, b := range boxes {
		b.stop()
	}
	rt.wg.Wait()
}
