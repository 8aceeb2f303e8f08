package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
)

// CreateOptions are the inputs of Create. Zero values take defaults.
type CreateOptions struct {
	Image       string
	SnapshotTag string
	N           int
	TTL         time.Duration
	CPUs        int
	MemoryMiB   int
	DiskMiB     int
	Pids        int
}

// validate checks o against the limits and fills in defaults. The lifetime
// is checked first: clients have been told about it before anything else.
func (s *Service) validate(o *CreateOptions) error {
	l := s.cfg.Limits
	switch {
	case o.TTL < 0:
		return invalidf("ttl_secs must not be negative")
	case o.TTL > l.MaxTTL:
		return invalidf("ttl_secs %d exceeds the maximum of %d", inSecs(o.TTL), inSecs(l.MaxTTL))
	case o.N < 0 || o.N > MaxN:
		return invalidf("n must be between 1 and %d, got %d", MaxN, o.N)
	case o.CPUs < 0 || o.CPUs > l.MaxCPUs:
		return invalidf("cpus must be between 1 and %d, got %d", l.MaxCPUs, o.CPUs)
	case o.MemoryMiB != 0 && (o.MemoryMiB < MinMemoryMiB || o.MemoryMiB > l.MaxMemoryMiB):
		return invalidf("memory_mib must be between %d and %d, got %d", MinMemoryMiB, l.MaxMemoryMiB, o.MemoryMiB)
	case o.DiskMiB != 0 && (o.DiskMiB < MinDiskMiB || o.DiskMiB > l.MaxDiskMiB):
		return invalidf("disk_mib must be between %d and %d, got %d", MinDiskMiB, l.MaxDiskMiB, o.DiskMiB)
	case o.Pids != 0 && (o.Pids < MinPids || o.Pids > l.MaxPids):
		return invalidf("pids must be between %d and %d, got %d", MinPids, l.MaxPids, o.Pids)
	}
	if o.N == 0 {
		o.N = 1
	}
	if o.TTL == 0 {
		o.TTL = l.DefaultTTL
	}
	if o.CPUs == 0 {
		o.CPUs = l.DefaultCPUs
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = l.DefaultMemoryMiB
	}
	if o.DiskMiB == 0 {
		o.DiskMiB = l.DefaultDiskMiB
	}
	if o.Pids == 0 {
		o.Pids = l.DefaultPids
	}
	if o.Image == "" {
		o.Image = s.cfg.DefaultImage
	}
	return nil
}

// Create starts o.N sandboxes, cold from an image or restored from a
// snapshot (taking ready ones from its warm pool first). It is all or
// nothing: if one fails to start, the others are destroyed.
func (s *Service) Create(ctx context.Context, o CreateOptions) ([]Info, error) {
	asked := o // before defaults: a snapshot's sandboxes run with its cpus, memory and limits
	if err := s.validate(&o); err != nil {
		return nil, err
	}
	src, err := s.sourceFor(o, asked)
	if err != nil {
		return nil, err
	}
	ready, err := s.reserve(o.N, src)
	if err != nil {
		return nil, err
	}
	defer s.release(o.N, src.memoryMiB)
	src.pooled = fromPool(ready)
	return s.spawn(ctx, src, o.N, o.TTL)
}

// sourceFor picks where o's sandboxes come from. asked is o before its
// defaults: asking a snapshot for other cpus, memory or limits than it
// runs with is an error.
func (s *Service) sourceFor(o, asked CreateOptions) (source, error) {
	if o.SnapshotTag == "" {
		return s.imageSource(o)
	}
	sn, err := s.snapshot(o.SnapshotTag)
	if err != nil {
		return source{}, err
	}
	src, err := s.snapshotSource(sn)
	if err != nil {
		return source{}, err
	}
	if (asked.CPUs != 0 && asked.CPUs != src.cpus) || (asked.MemoryMiB != 0 && asked.MemoryMiB != src.memoryMiB) {
		return source{}, invalidf("snapshot %q runs with %d cpus and %d MiB: spawn it without cpus and memory_mib", o.SnapshotTag, src.cpus, src.memoryMiB)
	}
	if (asked.DiskMiB != 0 && asked.DiskMiB != src.limits.DiskMiB) || (asked.Pids != 0 && asked.Pids != src.limits.Pids) {
		return source{}, invalidf("snapshot %q runs with disk_mib %d and pids %d: spawn it without them", o.SnapshotTag, src.limits.DiskMiB, src.limits.Pids)
	}
	return src, nil
}

// spawn makes n sandboxes from src, ready ones from a warm pool first, the
// rest started at most StartParallelism at a time. If one fails, the
// others are destroyed.
func (s *Service) spawn(ctx context.Context, src source, n int, ttl time.Duration) ([]Info, error) {
	out := make([]Info, n)
	errs := make([]error, n)
	sem := make(chan struct{}, s.cfg.StartParallelism)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b := src.pooled(); b != nil {
				out[i], errs[i] = s.handOut(ctx, b, ttl)
				return
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = s.createOne(ctx, src, ttl)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.stats.Failures.Add(1)
		for i, info := range out {
			if errs[i] == nil {
				s.Delete(context.WithoutCancel(ctx), info.ID)
			}
		}
		return nil, err
	}
	return out, nil
}

// source is where new sandboxes come from: an image (a cold boot) or a
// snapshot (a restore, or a ready sandbox from its warm pool).
type source struct {
	imageID, snapshotTag string
	// launch starts the sandbox described by spec.
	launch func(ctx context.Context, spec runtime.Spec) error
	files  runtime.ImageFiles
	// cpus, memoryMiB and limits are what the sandboxes run with.
	cpus, memoryMiB int
	limits          store.Limits
	// snap is the snapshot restored from, whose warm pool may hold ready
	// sandboxes; nil for an image.
	snap *snap
	// pooled returns one of the ready sandboxes a create claimed from the
	// warm pool, or nil.
	pooled func() *box
}

// imageSource boots sandboxes cold from the image o names or identifies,
// with o's cpus, memory and limits (o has its defaults).
func (s *Service) imageSource(o CreateOptions) (source, error) {
	imageID, files, err := s.cfg.Images.Resolve(o.Image)
	if err != nil {
		return source{}, fmt.Errorf("image %q: %w (build it with `cove image build`)", o.Image, ErrNotFound)
	}
	limits := store.Limits{DiskMiB: o.DiskMiB, Pids: o.Pids, OpenFiles: s.cfg.Limits.OpenFiles}
	return source{imageID: imageID, files: files, cpus: o.CPUs, memoryMiB: o.MemoryMiB, limits: limits,
		launch: s.cfg.Runtime.Start}, nil
}

// snapshotSource restores sandboxes from sn, with its cpus and memory,
// handing out ready ones from its warm pool first.
func (s *Service) snapshotSource(sn *snap) (source, error) {
	if sn.files.Rootfs == "" {
		return source{}, fmt.Errorf("snapshot %q: its image %s is gone: %w", sn.rec.Tag, sn.rec.Image, ErrNotFound)
	}
	if s.stale(sn) {
		return source{}, fmt.Errorf("%w: snapshot %q was saved by %s and this daemon runs %s, which cannot restore it: delete it and build it again",
			ErrConflict, sn.rec.Tag, sn.rec.RuntimeVersion, s.runtimeVersion)
	}
	dir := s.snapshotDir(sn.rec.Tag)
	return source{
		imageID: sn.rec.Image, snapshotTag: sn.rec.Tag, files: sn.files,
		cpus: sn.rec.CPUs, memoryMiB: sn.rec.MemoryMiB, limits: sn.rec.Limits,
		launch: func(ctx context.Context, spec runtime.Spec) error {
			return s.cfg.Runtime.Restore(ctx, spec, dir)
		},
		snap: sn,
	}, nil
}

// fromPool hands out ready, one sandbox a call, then nil.
func fromPool(ready []*box) func() *box {
	var mu sync.Mutex
	return func() *box {
		mu.Lock()
		defer mu.Unlock()
		if len(ready) == 0 {
			return nil
		}
		b := ready[0]
		ready = ready[1:]
		return b
	}
}

// claimPooledLocked takes up to n ready sandboxes from sn's warm pool.
// Those that died while they waited are destroyed instead.
func (s *Service) claimPooledLocked(sn *snap, n int) []*box {
	live := sn.pool[:0]
	for _, b := range sn.pool {
		select {
		case <-b.agent.Closed():
			go s.destroy(context.Background(), b)
		default:
			live = append(live, b)
		}
	}
	k := min(n, len(live))
	ready := append([]*box(nil), live[len(live)-k:]...)
	sn.pool = live[:len(live)-k]
	return ready
}

// handOut turns a pooled sandbox into a live one with its own token and
// lifetime.
func (s *Service) handOut(ctx context.Context, b *box, ttl time.Duration) (Info, error) {
	token := newToken()
	now := time.Now()
	b.mu.Lock()
	b.rec.Status = StatusRunning
	b.rec.TokenHash = hashToken(token)
	b.rec.CreatedAt = now
	b.rec.ExpiresAt = now.Add(ttl)
	rec := b.rec
	b.mu.Unlock()
	if err := s.cfg.Store.PutSandbox(ctx, rec); err != nil {
		s.destroy(context.WithoutCancel(ctx), b)
		return Info{}, err
	}
	s.mu.Lock()
	s.boxes[rec.ID] = b
	s.mu.Unlock()
	s.stats.Created.Add(1)
	s.stats.PoolHits.Add(1)
	info := b.info()
	info.Token = token
	return info, nil
}

// reserve holds slots and memory for n sandboxes from src while they
// start, all of them or none, and claims up to n ready sandboxes from
// src's warm pool: their memory is held already.
func (s *Service) reserve(n int, src source) (ready []*box, err error) {
	// Taking from a pool, or finding it empty, is when it may need
	// refilling.
	defer s.kickPool()
	s.mu.Lock()
	defer s.mu.Unlock()
	if max := s.cfg.Limits.MaxSandboxes; len(s.boxes)+s.reserved+n > max {
		return nil, fmt.Errorf("%w: %d sandboxes exist or are starting and the limit is %d: kill some first", ErrLimit, len(s.boxes)+s.reserved, max)
	}
	pooled := 0
	if src.snap != nil {
		pooled = min(n, len(src.snap.pool))
	}
	if budget, used := s.cfg.Limits.MemoryBudgetMiB, s.memoryInUseLocked(); budget > 0 && used+(n-pooled)*src.memoryMiB > budget {
		return nil, fmt.Errorf("%w: the memory budget of %d MiB would be exceeded: sandboxes, warm pools and creates in progress hold %d MiB, and %d more of %d MiB do not fit; kill some or ask for less memory",
			ErrUnavailable, budget, used, n-pooled, src.memoryMiB)
	}
	if src.snap != nil {
		ready = s.claimPooledLocked(src.snap, n)
	}
	// The claimed sandboxes' memory moves from their pool to the
	// reservation.
	s.reserved += n
	s.reservedMiB += n * src.memoryMiB
	return ready, nil
}

func (s *Service) release(n, memoryMiB int) {
	s.mu.Lock()
	s.reserved -= n
	s.reservedMiB -= n * memoryMiB
	s.mu.Unlock()
	s.kickPool() // a pool may have waited for the memory
}

// memoryInUseLocked is the memory, as configured limits, that counts
// against the budget: every live sandbox, every pooled one and pool
// restore in flight, and what creates in progress (snapshot builders
// included) hold.
func (s *Service) memoryInUseLocked() int {
	n := s.reservedMiB
	for _, b := range s.boxes {
		n += b.rec.MemoryMiB // set at creation, never changed
	}
	for _, sn := range s.snapshots {
		n += (len(sn.pool) + sn.filling) * sn.rec.MemoryMiB
	}
	return n
}

// createOne starts a live sandbox from src.
func (s *Service) createOne(ctx context.Context, src source, ttl time.Duration) (Info, error) {
	token := newToken()
	b, err := s.launch(ctx, src, StatusRunning, ttl, hashToken(token))
	if err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	s.boxes[b.rec.ID] = b
	s.mu.Unlock()
	s.stats.Created.Add(1)
	info := b.info()
	info.Token = token
	s.log.Info("sandbox created", "id", b.rec.ID, "image", src.imageID, "snapshot", src.snapshotTag,
		"elapsed", time.Since(b.rec.CreatedAt).Round(time.Millisecond))
	return info, nil
}

// launch starts a sandbox from src and waits until its agent answers. The
// sandbox ends up recorded with the given status; on error nothing is left.
func (s *Service) launch(ctx context.Context, src source, status string, ttl time.Duration, tokenHash string) (*box, error) {
	now := time.Now()
	rec := store.Sandbox{
		ID: newID(), Status: StatusCreating, Backend: s.cfg.Runtime.Name(), Image: src.imageID,
		SnapshotTag: src.snapshotTag, CPUs: src.cpus, MemoryMiB: src.memoryMiB, TokenHash: tokenHash,
		CreatedAt: now, ExpiresAt: now.Add(ttl), Limits: src.limits,
	}
	// The record comes first so that a daemon killed mid-start finds it and
	// cleans up after itself.
	if err := s.cfg.Store.PutSandbox(ctx, rec); err != nil {
		return nil, err
	}
	b := &box{rec: rec}
	spec := specFor(rec.ID, src, status == StatusBuilding)
	first := firstCall(rec.ID, src)
	start := func() error {
		if err := src.launch(ctx, spec); err != nil {
			return err
		}
		return s.awaitAgent(ctx, b, first)
	}
	err := start()
	if errors.Is(err, runtime.ErrExited) && src.snapshotTag == "" {
		// A guest that died while it booted (its kernel panicked, say)
		// gets one more boot: a cold start has no state to lose.
		s.log.Warn("sandbox died while booting; booting it again", "id", rec.ID, "err", err)
		if err = s.cfg.Runtime.Destroy(ctx, rec.ID); err == nil {
			err = start()
		}
	}
	if err == nil {
		err = s.cfg.Store.SetStatus(ctx, rec.ID, status)
	}
	if err != nil {
		s.destroy(context.WithoutCancel(ctx), b)
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	b.rec.Status = status
	return b, nil
}

// specFor is what the runtime is asked to start, or restore, for sandbox
// id from src. golden marks the sandbox a snapshot is built in.
func specFor(id string, src source, golden bool) runtime.Spec {
	return runtime.Spec{ID: id, ImageFiles: src.files, CPUs: src.cpus, MemoryMiB: src.memoryMiB, Hostname: id, Golden: golden,
		DiskMiB: src.limits.DiskMiB, Pids: src.limits.Pids, OpenFiles: src.limits.OpenFiles}
}

// firstCall is a new sandbox's first call to its agent; it doubles as the
// liveness check, so a clone answers once, not twice, before it is handed
// out. A restored sandbox's gives it its own identity: clones of one
// snapshot share the interpreter's random state, the kernel's RNG, the
// hostname and a stale clock.
func firstCall(id string, src source) func(context.Context, *agentproto.Client) error {
	if src.snapshotTag == "" {
		return ping
	}
	seed := make([]byte, 64)
	rand.Read(seed)
	restored := agentproto.RestoredRequest{SandboxID: id, Hostname: id, Seed: seed}
	return func(ctx context.Context, c *agentproto.Client) error {
		req := restored
		req.TimeUnixNano = time.Now().UnixNano()
		return c.Restored(ctx, req)
	}
}
