package sandbox

import (
	"context"
	"errors"
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

// fakeRuntime is a runtime.Runtime without any isolation: a "sandbox" is an
// in-process agent.Agent with its own work directory, reached over a
// net.Pipe. Absolute paths in exec still reach the host, so tests use
// relative paths only.
type fakeRuntime struct {
	dir string // parent of the sandboxes' work directories

	wg sync.WaitGroup // agent connections being served

	mu    sync.Mutex
	boxes map[string]*fakeBox
	// Failure injection, by 1-based call number.
	failStart   map[int]error
	deafStart   map[int]bool // the sandbox starts but its agent never answers
	failRestore map[int]error
	version     string
	hold        chan struct{} // when set, Start waits for it to close
	// What happened.
	starts       int
	restores     int
	specs        map[string]runtime.Spec
	restoredFrom map[string]string   // id -> image dir
	restoredReq  map[string][]string // id -> SandboxIDs passed to the agent's Restored
	warmed       map[string]int      // id -> agent Warm calls
	checkpoints  []fakeCheckpoint
	destroyed    []string
}

type fakeCheckpoint struct {
	id, image    string
	leaveRunning bool
}

type fakeBox struct {
	id      string
	workDir string
	agent   *agent.Agent
	ctx     context.Context
	cancel  context.CancelFunc // ends every connection to the agent
	deaf    bool               // Dial fails: the agent does not answer
	conns   []net.Conn         // agent ends of the connections
}

var _ runtime.Runtime = (*fakeRuntime)(nil)

func newFakeRuntime(t *testing.T) *fakeRuntime {
	t.Helper()
	rt := &fakeRuntime{
		dir:          t.TempDir(),
		boxes:        map[string]*fakeBox{},
		failStart:    map[int]error{},
		deafStart:    map[int]bool{},
		failRestore:  map[int]error{},
		specs:        map[string]runtime.Spec{},
		restoredFrom: map[string]string{},
		restoredReq:  map[string][]string{},
		warmed:       map[string]int{},
	}
	t.Cleanup(rt.shutdown)
	return rt
}

// fakeAgent is the agent with Warm and Restored recorded. Warm does not
// start a Python interpreter: these tests have no use for one.
type fakeAgent struct {
	*agent.Agent
	rt *fakeRuntime
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

func (rt *fakeRuntime) Name() string                       { return "fake" }
func (rt *fakeRuntime) Version(ctx context.Context) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.version == "" {
		return "fake 1"
	}
	return rt.version
}

// setVersion changes what Version reports, as an upgrade of runsc would.
func (rt *fakeRuntime) setVersion(v string) {
	rt.mu.Lock()
	rt.version = v
	rt.mu.Unlock()
}

// bootLocked makes a running sandbox. The caller holds rt.mu.
func (rt *fakeRuntime) bootLocked(id string) (*fakeBox, error) {
	if _, ok := rt.boxes[id]; ok {
		return nil, fmt.Errorf("fake: sandbox %s exists", id)
	}
	dir := filepath.Join(rt.dir, id)
	ctx, cancel := context.WithCancel(context.Background())
	b := &fakeBox{id: id, workDir: dir, ctx: ctx, cancel: cancel,
		agent: agent.New(agent.Config{WorkDir: dir, Hostname: func() (string, error) { return id, nil }})}
	rt.boxes[id] = b
	return b, nil
}

// boot makes a running sandbox the service knows nothing about, as an
// earlier daemon would have left it.
func (rt *fakeRuntime) boot(t *testing.T, id string) {
	t.Helper()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, err := rt.bootLocked(id); err != nil {
		t.Fatal(err)
	}
}

func (rt *fakeRuntime) Start(ctx context.Context, spec runtime.Spec) error {
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
	rt.specs[spec.ID] = spec
	return nil
}

func (rt *fakeRuntime) Restore(ctx context.Context, spec runtime.Spec, image string) error {
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

func (rt *fakeRuntime) Dial(ctx context.Context, id string) (net.Conn, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.boxes[id]
	if b == nil {
		return nil, fmt.Errorf("fake: sandbox %s: %w", id, runtime.ErrNotFound)
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

func (rt *fakeRuntime) Destroy(ctx context.Context, id string) error {
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

func (b *fakeBox) stop() {
	b.cancel()
	for _, c := range b.conns {
		c.Close()
	}
	b.agent.Close()
}

func (rt *fakeRuntime) Checkpoint(ctx context.Context, id, image string, leaveRunning bool) (time.Duration, error) {
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
	rt.checkpoints = append(rt.checkpoints, fakeCheckpoint{id: id, image: image, leaveRunning: leaveRunning})
	if !leaveRunning {
		// The sandbox stops; its resources stay until Destroy.
		b.cancel()
		for _, c := range b.conns {
			c.Close()
		}
	}
	return 3 * time.Millisecond, nil
}

func (rt *fakeRuntime) List(ctx context.Context) ([]string, error) {
	return rt.ids(), nil
}

// ids returns the ids of every sandbox the runtime holds, sorted.
func (rt *fakeRuntime) ids() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ids := make([]string, 0, len(rt.boxes))
	for id := range rt.boxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (rt *fakeRuntime) workDir(id string) string { return filepath.Join(rt.dir, id) }

// setDeaf makes a sandbox's agent stop answering new connections.
func (rt *fakeRuntime) setDeaf(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.boxes[id].deaf = true
}

// dropConns cuts every connection to a sandbox's agent, as a network
// hiccup would; new ones can still be made.
func (rt *fakeRuntime) dropConns(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, c := range rt.boxes[id].conns {
		c.Close()
	}
	rt.boxes[id].conns = nil
}

// Accessors for what happened, safe while the service runs.

func (rt *fakeRuntime) startCount() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.starts
}

func (rt *fakeRuntime) restoreCount() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.restores
}

func (rt *fakeRuntime) spec(id string) runtime.Spec {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.specs[id]
}

// restoredFromOf returns the image a sandbox was restored from.
func (rt *fakeRuntime) restoredFromOf(id string) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.restoredFrom[id]
}

// restoredCalls returns the ids a sandbox's agent was given by Restored.
func (rt *fakeRuntime) restoredCalls(id string) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.restoredReq[id])
}

func (rt *fakeRuntime) warmCount(id string) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.warmed[id]
}

func (rt *fakeRuntime) checkpointList() []fakeCheckpoint {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.checkpoints)
}

func (rt *fakeRuntime) wasDestroyed(id string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Contains(rt.destroyed, id)
}

// holdStarts makes every Start wait until the returned function is called.
func (rt *fakeRuntime) holdStarts() (release func()) {
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

// failNthStart makes the nth Start from now fail with err.
func (rt *fakeRuntime) failNthStart(n int, err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.failStart[rt.starts+n] = err
}

// deafNthStart makes the nth Start from now boot a sandbox whose agent
// never answers.
func (rt *fakeRuntime) deafNthStart(n int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.deafStart[rt.starts+n] = true
}

// failNthRestore makes the nth Restore from now fail with err.
func (rt *fakeRuntime) failNthRestore(n int, err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.failRestore[rt.restores+n] = err
}

func (rt *fakeRuntime) shutdown() {
	rt.mu.Lock()
	boxes := rt.boxes
	rt.boxes = map[string]*fakeBox{}
	rt.mu.Unlock()
	for _, b := range boxes {
		b.stop()
	}
	rt.wg.Wait()
}

// fakeImages resolves image names and ids.
type fakeImages struct {
	mu  sync.Mutex
	ids map[string]string // name -> id
}

func newFakeImages(ids map[string]string) *fakeImages { return &fakeImages{ids: ids} }

// set points an image name at a new id, as a rebuilt image does.
func (im *fakeImages) set(name, id string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.ids[name] = id
}

func (im *fakeImages) Resolve(nameOrID string) (id, rootfs string, err error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for name, id := range im.ids {
		if nameOrID == name || nameOrID == id {
			return id, "fake-rootfs/" + id, nil
		}
	}
	return "", "", errors.New("no such image")
}
