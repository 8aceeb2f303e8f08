package bench

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// cleanup remembers the sandboxes the snapshot benchmarks made and
// deletes them, and every snapshot tagged with prefix, at the end.
type cleanup struct {
	cl     *client.Client
	prefix string
	logf   func(format string, args ...any)

	mu        sync.Mutex
	sandboxes map[string]bool // made and not yet deleted
	snapshots map[string]bool // asked for and not yet deleted
}

func (c *cleanup) addSandboxes(sbs ...apitype.SandboxInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sandboxes == nil {
		c.sandboxes = make(map[string]bool)
	}
	for _, sb := range sbs {
		c.sandboxes[sb.ID] = true
	}
}

// addSnapshot notes tag before it is asked for: the daemon may make it
// even if the request fails or is given up.
func (c *cleanup) addSnapshot(tag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snapshots == nil {
		c.snapshots = make(map[string]bool)
	}
	c.snapshots[tag] = true
}

const (
	// cleanupTimeout bounds one delete during cleanup.
	cleanupTimeout = 30 * time.Second
	// deleteParallel bounds concurrent deletes.
	deleteParallel = 16
)

// destroy deletes sandbox id, even if ctx is canceled, and reports
// whether it is gone.
func (c *cleanup) destroy(ctx context.Context, id string) bool {
	if !deleteSandbox(ctx, c.cl, id, c.logf) {
		return false // run tries again
	}
	c.mu.Lock()
	delete(c.sandboxes, id)
	c.mu.Unlock()
	return true
}

// destroyAll deletes the sandboxes ids, a few at a time, as cove kill
// does, and says how many are still there.
func (c *cleanup) destroyAll(ctx context.Context, ids []string) (left int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, deleteParallel)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if !c.destroy(ctx, id) {
				mu.Lock()
				left++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return left
}

// deleteSnapshot deletes snapshot tag, even if ctx is canceled, waiting
// a little for sandboxes being deleted to let go of it.
func (c *cleanup) deleteSnapshot(ctx context.Context, tag string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for {
		err := c.cl.DeleteSnapshot(ctx, tag)
		if err == nil || errors.Is(err, client.ErrNotFound) {
			c.mu.Lock()
			delete(c.snapshots, tag)
			c.mu.Unlock()
			return
		}
		if !errors.Is(err, client.ErrConflict) {
			c.logf("warning: delete snapshot %s: %v", tag, err)
			return
		}
		select {
		case <-ctx.Done():
			c.logf("warning: delete snapshot %s: %v", tag, err)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ours reports whether snapshot tag was made by this run.
func (c *cleanup) ours(tag string) bool {
	return tag == c.prefix || strings.HasPrefix(tag, c.prefix+"-")
}

// run deletes what is left: the sandboxes it knows of and those spawned
// from this run's snapshots, then the snapshots, deepest first.
func (c *cleanup) run(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	c.mu.Lock()
	ids := slices.Collect(maps.Keys(c.sandboxes))
	c.mu.Unlock()
	// A spawn that failed or was given up may still have made sandboxes.
	lctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	sbs, err := c.cl.ListSandboxes(lctx)
	cancel()
	if err != nil {
		c.logf("warning: list sandboxes to clean up: %v", err)
	}
	for _, sb := range sbs {
		if sb.SnapshotTag != "" && c.ours(sb.SnapshotTag) && !slices.Contains(ids, sb.ID) {
			ids = append(ids, sb.ID)
		}
	}
	if len(ids) > 0 {
		c.logf("cleaning up %d sandboxes", len(ids))
		c.destroyAll(ctx, ids)
	}

	depth := make(map[string]int)
	c.mu.Lock()
	for tag := range c.snapshots {
		depth[tag] = 0
	}
	c.mu.Unlock()
	lctx, cancel = context.WithTimeout(ctx, cleanupTimeout)
	sis, err := c.cl.ListSnapshots(lctx)
	cancel()
	if err != nil {
		c.logf("warning: list snapshots to clean up: %v", err)
	}
	for _, si := range sis {
		if c.ours(si.Tag) {
			depth[si.Tag] = si.Depth
		}
	}
	tags := slices.Collect(maps.Keys(depth))
	slices.SortFunc(tags, func(a, b string) int { return cmp.Or(cmp.Compare(depth[b], depth[a]), cmp.Compare(a, b)) })
	for _, tag := range tags {
		c.deleteSnapshot(ctx, tag)
	}
}
