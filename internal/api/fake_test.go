package api

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
// relative paths only. (internal/sandbox's tests have a fuller one with
// failure injection.)
type fakeRuntime struct {
	dir string
	wg  sync.WaitGroup

	mu    sync.Mutex
	boxes map[string]*fakeBox
}

type fakeBox struct {
	workDir string
	agent   *agent.Agent
	ctx     context.Context
	cancel  context.CancelFunc
	conns   []net.Conn
}

var _ runtime.Runtime = (*fakeRuntime)(nil)

func newFakeRuntime(t *testing.T) *fakeRuntime {
	t.Helper()
	rt := &fakeRuntime{dir: t.TempDir(), boxes: map[string]*fakeBox{}}
	t.Cleanup(rt.shutdown)
	return rt
}

// warmless is the agent without a Python interpreter to warm.
type warmless struct{ *agent.Agent }

func (warmless) Warm(context.Context) error { return nil }

func (rt *fakeRuntime) Name() string                       { return "fake" }
func (rt *fakeRuntime) Version(ctx context.Context) string { return "fake 1" }

func (rt *fakeRuntime) boot(id string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.boxes[id]; ok {
		return fmt.Errorf("fake: sandbox %s exists", id)
	}
	dir := filepath.Join(rt.dir, id)
	ctx, cancel := context.WithCancel(context.Background())
	rt.boxes[id] = &fakeBox{workDir: dir, ctx: ctx, cancel: cancel,
		agent: agent.New(agent.Config{WorkDir: dir, Hostname: func() (string, error) { return id, nil }})}
	return nil
}

func (rt *fakeRuntime) Start(ctx context.Context, spec runtime.Spec) error { return rt.boot(spec.ID) }

func (rt *fakeRuntime) Restore(ctx context.Context, spec runtime.Spec, image string) error {
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return fmt.Errorf("fake: restore %s: %w", spec.ID, err)
	}
	return rt.boot(spec.ID)
}

func (rt *fakeRuntime) Dial(ctx context.Context, id string) (net.Conn, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.boxes[id]
	if b == nil {
		return nil, fmt.Errorf("fake: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	if b.ctx.Err() != nil {
		return nil, fmt.Errorf("fake: sandbox %s: connection refused", id)
	}
	host, guest := net.Pipe()
	b.conns = append(b.conns, guest)
	rt.wg.Go(func() { agentproto.ServeConn(b.ctx, guest, warmless{b.agent}) })
	return host, nil
}

func (rt *fakeRuntime) Destroy(ctx context.Context, id string) error {
	rt.mu.Lock()
	b := rt.boxes[id]
	delete(rt.boxes, id)
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
	if !leaveRunning {
		b.cancel()
		for _, c := range b.conns {
			c.Close()
		}
	}
	return time.Millisecond, nil
}

func (rt *fakeRuntime) List(ctx context.Context) ([]string, error) { return rt.ids(), nil }

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
type fakeImages map[string]string // name -> id

func (im fakeImages) Resolve(nameOrID string) (id, rootfs string, err error) {
	for name, id := range im {
		if nameOrID == name || nameOrID == id {
			return id, "fake-rootfs/" + id, nil
		}
	}
	return "", "", errors.New("no such image")
}
