package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
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
	// SnapshotToken is the credential for a snapshot saved from a sandbox
	// (by a branch): that sandbox's token.
	SnapshotToken string
	// Network is the sandboxes' egress policy; nil: the snapshot's, or
	// for an image, deny all.
	Network *netpolicy.Policy
	// Labels are the sandboxes' labels; nil: the snapshot's. User is the
	// account their commands and files are run and written as by default;
	// "": the snapshot's, else root.
	Labels map[string]string
	User   string
	// Env and Cwd are the environment and working directory of every
	// process started in the sandboxes (a call's own come on top); nil and
	// "": the snapshot's.
	Env map[string]string
	Cwd string
	// AutoResume and OnExpiry are the sandboxes' pause policy (pause.go).
	AutoResume bool
	OnExpiry   string

	// tenant owns the new sandboxes: a branch's children are their
	// source's; "": the caller's.
	tenant string
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
	case !validOnExpiry(o.OnExpiry):
		return invalidf("on_expiry must be %q or %q, got %q", apitype.OnExpiryKill, apitype.OnExpiryPause, o.OnExpiry)
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
// nothing, also across a crash: if one fails to start, the others are
// destroyed, and none is recorded as running, nor listed, before all are.
func (s *Service) Create(ctx context.Context, o CreateOptions) ([]Info, error) {
	return s.create(ctx, o, "")
}

// create is Create. branch, when set, is the tag of the snapshot that the
// branch making these sandboxes has just saved: the branch was entitled
// to copy its source, and commits that snapshot with them.
func (s *Service) create(ctx context.Context, o CreateOptions, branch string) ([]Info, error) {
	asked := o // before defaults: a snapshot's sandboxes run with its cpus, memory and limits
	if o.TTL == 0 {
		o.TTL = quotaTTL(ctx, s.cfg.Limits.DefaultTTL)
	}
	if err := s.validate(&o); err != nil {
		return nil, err
	}
	if err := checkTTLQuota(ctx, o.TTL); err != nil {
		return nil, err
	}
	if err := s.checkPolicy(o.Network); err != nil {
		return nil, err
	}
	src, err := s.sourceFor(ctx, o, asked, branch != "")
	if err != nil {
		return nil, err
	}
	src.tenant = o.tenant
	if src.tenant == "" {
		src.tenant = sandboxOwner(ctx)
	}
	src.network = policyOr(o.Network, src.network)
	if src.meta, err = metaFor(o, src.meta); err != nil {
		return nil, err
	}
	src.checkMeta = o.User != "" || o.Cwd != ""
	src.lifecycle = store.Lifecycle{AutoResume: o.AutoResume, OnExpiry: o.OnExpiry}
	ready, res, err := s.reserve(ctx, o.N, src, true)
	if err != nil {
		return nil, err
	}
	defer s.release(res)
	src.res = res
	src.pooled = fromPool(ready)
	return s.spawn(ctx, src, o.N, o.TTL, branch)
}

// sourceFor picks where o's sandboxes come from. asked is o before its
// defaults: asking a snapshot for other cpus, memory or limits than it
// runs with is an error. entitled skips the check of o.SnapshotToken.
func (s *Service) sourceFor(ctx context.Context, o, asked CreateOptions, entitled bool) (source, error) {
	if o.SnapshotTag == "" {
		return s.imageSource(o)
	}
	sn, err := s.snapshot(ctx, o.SnapshotTag)
	if err != nil {
		return source{}, err
	}
	if !entitled {
		if err := snapshotTokenOK(sn.rec, o.SnapshotToken); err != nil {
			return source{}, err
		}
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
// rest started at most StartParallelism at a time, and commits them
// together (with branch's snapshot, if set). If one fails, the others are
// destroyed.
func (s *Service) spawn(ctx context.Context, src source, n int, ttl time.Duration, branch string) ([]Info, error) {
	boxes := make([]*box, n)
	tokens := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, s.cfg.StartParallelism)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tokens[i] = newToken()
			if b := src.pooled(); b != nil {
				b.setMeta(src.meta)
				b.setLifecycle(src.lifecycle)
				b.setTenant(src.tenant)
				boxes[i], errs[i] = b, s.handOut(ctx, b, src.network, hashToken(tokens[i]), ttl)
			} else {
				sem <- struct{}{}
				defer func() { <-sem }()
				boxes[i], errs[i] = s.createOne(ctx, src, ttl, hashToken(tokens[i]))
			}
			if errs[i] == nil && src.checkMeta {
				errs[i] = checkMeta(ctx, boxes[i].client(), src.meta)
			}
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil {
		err = s.commit(ctx, boxes, branch, src.res)
	}
	if err != nil {
		s.stats.Failures.Add(1)
		for _, b := range boxes {
			if b != nil {
				s.destroy(context.WithoutCancel(ctx), b)
			}
		}
		return nil, err
	}
	out := make([]Info, n)
	for i, b := range boxes {
		out[i] = b.info()
		out[i].Token = tokens[i]
		// After the commit, which writes a pooled sandbox's row: a seal
		// that fails costs only RevealToken, never the sandbox.
		if err := s.sealToken(ctx, out[i].ID, tokens[i]); err != nil {
			s.log.WarnContext(ctx, "sandbox token not sealed: it cannot be given again", "sandbox", out[i].ID, "err", err)
		}
	}
	return out, nil
}

// commit ends a call that made sandboxes: their records say running, and
// branch's snapshot (if set) is no longer pending, in one store
// transaction; only then are the sandboxes listed and reachable. Until it,
// a restart destroys them: their records say creating (or pooled).
func (s *Service) commit(ctx context.Context, boxes []*box, branch string, res *reservation) error {
	recs := make([]store.Sandbox, len(boxes))
	for i, b := range boxes {
		b.mu.Lock()
		recs[i] = b.rec
		b.mu.Unlock()
		recs[i].Status = StatusRunning
	}
	if err := s.cfg.Store.Commit(ctx, recs, branch); err != nil {
		return err
	}
	s.mu.Lock()
	for _, b := range boxes {
		b.mu.Lock()
		b.rec.Status = StatusRunning
		b.mu.Unlock()
		s.boxes[b.rec.ID] = b
	}
	s.unholdLocked(res) // they count as live sandboxes now
	if sn := s.snapshots[branch]; sn != nil {
		sn.rec.Pending = false
	}
	s.mu.Unlock()
	for _, b := range boxes {
		s.cfg.Meter.Started(ctx, meterRun(b, b.owner()))
	}
	// A sandbox whose process ended before it was live was left to us by
	// its watch.
	for _, b := range boxes {
		b.mu.Lock()
		ex := b.exit
		b.mu.Unlock()
		if ex != nil {
			s.markDead(b, *ex)
		}
	}
	return nil
}

// snapshotTokenOK checks the credential for spawning from a snapshot: none
// for one built from an image; for one saved from a sandbox, that
// sandbox's token, since the snapshot holds its state.
func snapshotTokenOK(rec store.Snapshot, token string) error {
	switch {
	case rec.TokenHash == "":
		return nil
	case token == "":
		return fmt.Errorf("%w: snapshot %q was saved from sandbox %s, so spawning from it needs that sandbox's token", ErrNoToken, rec.Tag, rec.BranchedFrom)
	case !tokenMatches(rec.TokenHash, token):
		return fmt.Errorf("%w: wrong token for snapshot %q: it takes the token of sandbox %s, which it was saved from", ErrForbidden, rec.Tag, rec.BranchedFrom)
	}
	return nil
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
	// network is the egress policy they start with.
	network netpolicy.Policy
	meta    store.Meta // their labels, default user, env and cwd
	// checkMeta says the call gave the user or cwd in meta, which each
	// sandbox is checked to have before the call answers; inherited ones
	// were checked when their snapshot was saved.
	checkMeta bool
	// lifecycle is their pause policy.
	lifecycle store.Lifecycle
	// tenant owns them ("": none, a warm pool's until handed out).
	tenant string
	// res is the create's reservation, whose quota hold its commit drops.
	res *reservation
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
		network: sn.net, meta: sn.rec.Meta,
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
		b.mu.Lock()
		exited := b.exit != nil
		b.mu.Unlock()
		select {
		case <-b.agent.Closed():
			exited = true
		default:
		}
		if exited {
			go s.destroy(context.Background(), b)
			continue
		}
		live = append(live, b)
	}
	k := min(n, len(live))
	ready := append([]*box(nil), live[len(live)-k:]...)
	sn.pool = live[:len(live)-k]
	return ready
}

// handOut gives a pooled sandbox its own token, lifetime and egress
// policy; its call's commit records and lists it. A pooled sandbox runs
// with its snapshot's policy, which most claims keep: only another one
// costs an update.
func (s *Service) handOut(ctx context.Context, b *box, p netpolicy.Policy, tokenHash string, ttl time.Duration) error {
	now := time.Now()
	b.mu.Lock()
	b.rec.Status = StatusCreating
	b.rec.TokenHash = tokenHash
	b.rec.CreatedAt = now
	b.rec.ExpiresAt = now.Add(ttl)
	cur := b.net
	b.mu.Unlock()
	s.stats.Created.Add(1)
	s.stats.PoolHits.Add(1)
	if samePolicy(cur, p) {
		return nil
	}
	if err := s.applyPolicy(ctx, b, p); err != nil {
		return err
	}
	b.setNetwork(p)
	return nil
}

// reserve holds slots and memory for n sandboxes from src while they
// start, all of them or none, and claims up to n ready sandboxes from
// src's warm pool: their memory is held already. It checks src.tenant's
// quotas (ctx's caller's limits) under the same lock, and holds the
// sandboxes against them too, so concurrent calls cannot overshoot; spawn
// says the call makes sandboxes (max_spawn_n applies). done gives it all
// back.
func (s *Service) reserve(ctx context.Context, n int, src source, spawn bool) (ready []*box, res *reservation, err error) {
	// Taking from a pool, or finding it empty, is when it may need
	// refilling.
	defer s.kickPool()
	s.mu.Lock()
	defer s.mu.Unlock()
	a := ask{tenant: src.tenant, limits: tenant.LimitsOf(ctx), n: n, cpus: src.cpus, memoryMiB: int64(src.memoryMiB), spawn: spawn}
	if err := s.checkQuotaLocked(a); err != nil {
		return nil, nil, err
	}
	if max := s.cfg.Limits.MaxSandboxes; len(s.boxes)+s.reserved+n > max {
		return nil, nil, fmt.Errorf("%w: %d sandboxes exist or are starting and the limit is %d: kill some first", ErrLimit, len(s.boxes)+s.reserved, max)
	}
	pooled := 0
	if src.snap != nil {
		pooled = min(n, len(src.snap.pool))
	}
	if budget, used := s.cfg.Limits.MemoryBudgetMiB, s.memoryInUseLocked(); budget > 0 && used+(n-pooled)*src.memoryMiB > budget {
		return nil, nil, fmt.Errorf("%w: the memory budget of %d MiB would be exceeded: sandboxes, warm pools and creates in progress hold %d MiB, and %d more of %d MiB do not fit; kill some or ask for less memory",
			ErrUnavailable, budget, used, n-pooled, src.memoryMiB)
	}
	if err := s.hostFitsLocked(n - pooled); err != nil {
		return nil, nil, err
	}
	if src.snap != nil {
		ready = s.claimPooledLocked(src.snap, n)
	}
	// The claimed sandboxes' memory moves from their pool to the
	// reservation.
	s.reserved += n
	s.reservedMiB += n * src.memoryMiB
	s.holdLocked(a, 1)
	return ready, &reservation{a: a, held: true}, nil
}

// release gives back what reserve held.
func (s *Service) release(r *reservation) {
	s.mu.Lock()
	s.reserved -= r.a.n
	s.reservedMiB -= r.a.n * int(r.a.memoryMiB)
	s.unholdLocked(r)
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
		if !b.paused() {
			n += b.rec.MemoryMiB // set at creation, never changed
		}
	}
	for _, sn := range s.snapshots {
		n += (len(sn.pool) + sn.filling) * sn.rec.MemoryMiB
	}
	return n
}

// createOne starts a sandbox from src for a call that makes live ones; it
// stays creating until the call commits.
func (s *Service) createOne(ctx context.Context, src source, ttl time.Duration, tokenHash string) (*box, error) {
	b, err := s.launch(ctx, src, StatusCreating, ttl, tokenHash)
	if err != nil {
		return nil, err
	}
	// Watched from now on: a death before the commit is the commit's to mark.
	s.watch(b)
	s.stats.Created.Add(1)
	s.log.Info("sandbox created", "id", b.rec.ID, "image", src.imageID, "snapshot", src.snapshotTag,
		"elapsed", time.Since(b.rec.CreatedAt).Round(time.Millisecond))
	return b, nil
}

// launch starts a sandbox from src and waits until its agent answers. The
// sandbox ends up recorded with the given status (StatusCreating: as it
// started, for its call to commit); on error nothing is left.
func (s *Service) launch(ctx context.Context, src source, status string, ttl time.Duration, tokenHash string) (*box, error) {
	now := time.Now()
	rec := store.Sandbox{
		ID: newID(), Status: StatusCreating, Backend: s.cfg.Runtime.Name(), Image: src.imageID,
		SnapshotTag: src.snapshotTag, CPUs: src.cpus, MemoryMiB: src.memoryMiB, TokenHash: tokenHash,
		CreatedAt: now, ExpiresAt: now.Add(ttl), Limits: src.limits, NetworkJSON: encodePolicy(src.network),
		Meta: src.meta, Lifecycle: src.lifecycle, Tenant: src.tenant,
	}
	// The record comes first so that a daemon killed mid-start finds it and
	// cleans up after itself.
	if err := s.cfg.Store.PutSandbox(ctx, rec); err != nil {
		return nil, err
	}
	s.log.Debug("starting sandbox", "id", rec.ID, "image", src.imageID, "snapshot", src.snapshotTag)
	b := s.newBox(rec)
	b.net = src.network
	spec := specFor(rec.ID, src, status == StatusBuilding)
	first := firstCall(rec.ID, src)
	// The network is attached as soon as the sandbox runs: a restored
	// one's processes carry on at once.
	start := func() error {
		if err := src.launch(ctx, spec); err != nil {
			return err
		}
		if err := s.attachNetwork(ctx, b); err != nil {
			return err
		}
		return s.awaitAgent(ctx, b, first)
	}
	err := start()
	if errors.Is(err, runtime.ErrExited) && src.snapshotTag == "" {
		// A guest that died while it booted (its kernel panicked, say)
		// gets one more boot: a cold start has no state to lose.
		s.log.Warn("sandbox died while booting; booting it again", "id", rec.ID, "err", err)
		s.detachNetwork(b)
		if err = s.cfg.Runtime.Destroy(ctx, rec.ID); err == nil {
			err = start()
		}
	}
	if err == nil && status != StatusCreating {
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
