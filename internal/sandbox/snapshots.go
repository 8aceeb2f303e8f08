package sandbox

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

// snap is a snapshot and its warm pool.
type snap struct {
	rec   store.Snapshot
	files runtime.ImageFiles // zero when its image is gone: it cannot be spawned
	ready bool               // false while the tag is only claimed
	net   netpolicy.Policy   // the egress policy its sandboxes start with
	// Guarded by Service.mu.
	pool    []*box // restored, ready to hand out
	filling int    // pool restores in flight
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	store.Snapshot
	PoolReady int
	Children  int // live sandboxes spawned from it
	// Network is the egress policy its sandboxes start with, unless their
	// create says otherwise.
	Network netpolicy.Policy
}

// BranchResult is what Branch returns.
type BranchResult struct {
	Snapshot SnapshotInfo
	// Pause is the longest the source's agent went without answering
	// back-to-back pings during the checkpoint: the pause as a client sees
	// it. Stopped is what the runtime reports: how long it had the source
	// stopped (QEMU: the switch-over; runsc: the whole save).
	Pause, Stopped time.Duration
	Children       []Info
}

// DefaultWarm is the warm-up a built snapshot runs when its creator gives none.
const DefaultWarm = `python3 -c "import json, sqlite3, os, sys, subprocess"`

var tagRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func validTag(tag string) error {
	if !tagRE.MatchString(tag) {
		return invalidf("tag %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", tag)
	}
	return nil
}

// snapshot returns a snapshot by tag that ctx's caller may see.
func (s *Service) snapshot(ctx context.Context, tag string) (*snap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.snapshots[tag]
	if sn == nil || (sn.ready && !sn.visible(ctx)) {
		return nil, fmt.Errorf("snapshot %q: %w", tag, ErrNoSnapshot)
	}
	if !sn.ready {
		return nil, fmt.Errorf("%w: snapshot %q is being made", ErrRetry, tag)
	}
	return sn, nil
}

func (s *Service) snapshotDir(tag string) string { return filepath.Join(s.cfg.SnapshotDir, tag) }

// stale reports whether sn was saved by another version of the runtime.
func (s *Service) stale(sn *snap) bool {
	return sn.rec.RuntimeVersion != s.runtimeVersion
}

// BuildOptions are the inputs of BuildSnapshot.
type BuildOptions struct {
	Tag       string
	Image     string
	Warm      string // shell command; "" runs DefaultWarm
	CPUs      int
	MemoryMiB int
	DiskMiB   int
	Pids      int
	PoolSize  int // -1: the configured default
	// Network is the builder's egress policy while it warms up, and the
	// snapshot's; nil denies all.
	Network *netpolicy.Policy
	// Output, if set, gets the warm command's output while it runs.
	Output io.Writer
}

// BuildSnapshot boots a sandbox from an image, warms it up (the command,
// then the eval interpreter) and saves it as a snapshot.
func (s *Service) BuildSnapshot(ctx context.Context, o BuildOptions) (SnapshotInfo, error) {
	if err := notHidden(o.Tag); err != nil {
		return SnapshotInfo{}, err
	}
	return s.buildSnapshot(ctx, o)
}

func (s *Service) buildSnapshot(ctx context.Context, o BuildOptions) (SnapshotInfo, error) {
	if err := validTag(o.Tag); err != nil {
		return SnapshotInfo{}, err
	}
	if o.PoolSize < 0 {
		o.PoolSize = s.cfg.DefaultPoolSize
	}
	if o.PoolSize > 64 {
		return SnapshotInfo{}, invalidf("pool_size must be at most 64")
	}
	co := CreateOptions{Image: o.Image, CPUs: o.CPUs, MemoryMiB: o.MemoryMiB, DiskMiB: o.DiskMiB, Pids: o.Pids}
	if err := s.validate(&co); err != nil {
		return SnapshotInfo{}, err
	}
	if err := s.checkPolicy(o.Network); err != nil {
		return SnapshotInfo{}, err
	}
	src, err := s.imageSource(co)
	if err != nil {
		return SnapshotInfo{}, err
	}
	src.network = policyOr(o.Network, netpolicy.Policy{})
	owner := snapshotOwner(ctx)
	src.tenant = owner // the builder counts against its snapshot's tenant's quotas
	if err := s.checkDiskQuota(ctx, owner, fmt.Sprintf("snapshot %q", o.Tag)); err != nil {
		return SnapshotInfo{}, err
	}
	release, err := s.claimTag(o.Tag)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer release()
	_, res, err := s.reserve(ctx, 1, src, false)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer s.release(res)

	b, err := s.launch(ctx, src, StatusBuilding, time.Hour, "")
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer s.destroy(context.WithoutCancel(ctx), b)
	warm := o.Warm
	if warm == "" {
		warm = DefaultWarm
	}
	if err := runWarm(ctx, b.agent, warm, s.warmLog, o.Output); err != nil {
		return SnapshotInfo{}, err
	}
	if err := b.agent.Warm(ctx); err != nil {
		return SnapshotInfo{}, fmt.Errorf("warm the eval interpreter: %w", mapErr(err))
	}
	rec := store.Snapshot{Tag: o.Tag, Backend: s.cfg.Runtime.Name(), Image: src.imageID, CPUs: co.CPUs,
		MemoryMiB: co.MemoryMiB, PoolSize: o.PoolSize, Limits: src.limits, NetworkJSON: encodePolicy(src.network),
		Tenant: owner}
	sn, _, _, err := s.checkpoint(ctx, b, rec, src.files, false)
	if err != nil {
		return SnapshotInfo{}, err
	}
	s.kickPool()
	return s.snapInfo(sn), nil
}

// BranchOptions are the inputs of Branch.
type BranchOptions struct {
	Tag string // "" generates one
	N   int    // children to spawn from the new snapshot
	TTL time.Duration
	// Network is the new snapshot's egress policy, and its children's;
	// nil: the source's.
	Network *netpolicy.Policy
	// Labels and User are the new snapshot's, and its children's; nil and
	// "": the source's.
	Labels map[string]string
	User   string
	// Env and Cwd are the new snapshot's and its children's (see
	// CreateOptions); nil and "": the source's.
	Env map[string]string
	Cwd string
}

// Branch saves the sandbox as a new snapshot while it keeps running, then
// spawns o.N children from it. The sandbox is paused only while its state
// is written. It is a method of an opened sandbox because it copies the
// sandbox's state: that takes its token, and the snapshot keeps the
// token's hash, so spawning from it later takes the same token.
func (sb *Sandbox) Branch(ctx context.Context, o BranchOptions) (BranchResult, error) {
	return sb.s.branch(ctx, sb.b, o)
}

func (s *Service) branch(ctx context.Context, b *box, o BranchOptions) (BranchResult, error) {
	if err := b.usable(); err != nil {
		return BranchResult{}, err
	}
	id := b.rec.ID
	// The lifetime first, as in Create.
	if max := s.cfg.Limits.MaxTTL; o.TTL < 0 || o.TTL > max {
		return BranchResult{}, invalidf("ttl_secs must be between 0 and %d", inSecs(max))
	}
	if o.N < 0 || o.N > MaxN {
		return BranchResult{}, invalidf("n must be between 0 and %d, got %d", MaxN, o.N)
	}
	if err := checkTTLQuota(ctx, o.TTL); err != nil {
		return BranchResult{}, err
	}
	if o.Tag == "" {
		o.Tag = id + "-" + randhex.New(3)
	}
	if err := validTag(o.Tag); err != nil {
		return BranchResult{}, err
	}
	if err := notHidden(o.Tag); err != nil {
		return BranchResult{}, err
	}
	if err := s.checkPolicy(o.Network); err != nil {
		return BranchResult{}, err
	}
	meta, err := s.branchMeta(ctx, b, o)
	if err != nil {
		return BranchResult{}, err
	}
	b.mu.Lock()
	network := policyOr(o.Network, b.net)
	b.mu.Unlock()
	owner := b.owner()
	if err := s.checkDiskQuota(ctx, owner, fmt.Sprintf("snapshot %q", o.Tag)); err != nil {
		return BranchResult{}, err
	}
	// The children's quotas before the save, which their create checks
	// again (and holds) after it: a branch refused for them saves nothing.
	if o.N > 0 {
		s.mu.Lock()
		err := s.checkQuotaLocked(ask{tenant: owner, limits: tenant.LimitsOf(ctx), n: o.N, cpus: b.rec.CPUs,
			memoryMiB: int64(b.rec.MemoryMiB), spawn: true})
		s.mu.Unlock()
		if err != nil {
			return BranchResult{}, err
		}
	}
	release, err := s.claimTag(o.Tag)
	if err != nil {
		return BranchResult{}, err
	}
	defer release()

	depth := 1
	if t := b.rec.SnapshotTag; t != "" {
		if p, err := s.snapshot(context.Background(), t); err == nil { // its own parent, whoever may see it
			depth = p.rec.Depth + 1
		}
	}
	_, files, err := s.imageOf(b)
	if err != nil {
		return BranchResult{}, err
	}
	// With children, the snapshot is pending until they commit with it: a
	// daemon killed before the branch answers leaves neither.
	rec := store.Snapshot{Tag: o.Tag, Parent: b.rec.SnapshotTag, BranchedFrom: id, Depth: depth,
		Backend: s.cfg.Runtime.Name(), Image: b.rec.Image, CPUs: b.rec.CPUs, MemoryMiB: b.rec.MemoryMiB, Limits: b.rec.Limits,
		TokenHash: b.rec.TokenHash, Pending: o.N > 0, NetworkJSON: encodePolicy(network),
		Meta: meta, Tenant: owner}
	sn, pause, stopped, err := s.checkpoint(ctx, b, rec, files, true)
	if err != nil {
		return BranchResult{}, err
	}
	release()
	out := BranchResult{Pause: pause, Stopped: stopped}
	if o.N > 0 {
		out.Children, err = s.create(ctx, CreateOptions{SnapshotTag: o.Tag, N: o.N, TTL: o.TTL, tenant: owner}, o.Tag)
		if err != nil {
			// The snapshot stays, as the error says.
			if cerr := s.commit(context.WithoutCancel(ctx), nil, o.Tag, nil); cerr != nil {
				s.log.Warn("keep a branch's snapshot", "tag", o.Tag, "err", cerr)
			}
			return BranchResult{}, fmt.Errorf("snapshot %s saved, but spawning its children failed: %w", o.Tag, err)
		}
	}
	out.Snapshot = s.snapInfo(sn)
	return out, nil
}

// imageOf resolves the image a sandbox runs on.
func (s *Service) imageOf(b *box) (id string, files runtime.ImageFiles, err error) {
	id, files, err = s.cfg.Images.Resolve(b.rec.Image)
	if err != nil {
		return "", runtime.ImageFiles{}, fmt.Errorf("image %q of sandbox %s: %w", b.rec.Image, b.rec.ID, ErrNotFound)
	}
	return id, files, nil
}

// checkpoint saves b as the snapshot rec describes. The image is written
// beside its final place and renamed, so a crash leaves no half snapshot.
func (s *Service) checkpoint(ctx context.Context, b *box, rec store.Snapshot, files runtime.ImageFiles, leaveRunning bool) (sn *snap, pause, stopped time.Duration, err error) {
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	tmp := filepath.Join(s.cfg.SnapshotDir, ".tmp-"+rec.Tag+"-"+randhex.New(4))
	defer os.RemoveAll(tmp)
	if leaveRunning {
		pause, err = s.measurePause(ctx, b, func() error {
			stopped, err = s.cfg.Runtime.Checkpoint(ctx, b.rec.ID, tmp, true)
			return err
		})
	} else {
		stopped, err = s.cfg.Runtime.Checkpoint(ctx, b.rec.ID, tmp, false)
		pause = stopped
	}
	if err != nil {
		return nil, 0, 0, s.noSpace(fmt.Errorf("checkpoint sandbox %s: %w", b.rec.ID, err), fmt.Sprintf("snapshot %q", rec.Tag), "snapshots")
	}
	rec.SizeBytes = dirSize(tmp)
	rec.CreatedAt = time.Now()
	rec.RuntimeVersion = s.runtimeVersion
	final := s.snapshotDir(rec.Tag)
	if err := os.Rename(tmp, final); err != nil {
		return nil, 0, 0, s.noSpace(fmt.Errorf("save snapshot %s: %w", rec.Tag, err), fmt.Sprintf("snapshot %q", rec.Tag), "snapshots")
	}
	if err := s.cfg.Store.PutSnapshot(ctx, rec); err != nil {
		os.RemoveAll(final)
		return nil, 0, 0, err
	}
	sn = &snap{rec: rec, files: files, ready: true, net: s.decodePolicy(rec.Tag, rec.NetworkJSON)}
	s.mu.Lock()
	s.snapshots[rec.Tag] = sn
	s.mu.Unlock()
	s.log.Info("snapshot saved", "tag", rec.Tag, "from", b.rec.ID, "bytes", rec.SizeBytes, "pause", pause, "stopped", stopped)
	return sn, pause, stopped, nil
}

// measurePause runs fn (a live checkpoint) while pinging the sandbox's
// agent back to back. The longest gap between two answers is how long the
// sandbox stood still, as a client sees it.
func (s *Service) measurePause(ctx context.Context, b *box, fn func() error) (time.Duration, error) {
	b.mu.Lock()
	a, uerr := b.agent, b.usableLocked()
	b.mu.Unlock()
	if uerr != nil {
		return 0, uerr
	}
	if a == nil {
		return 0, fmt.Errorf("%w: sandbox %s has no agent connection", ErrUnavailable, b.rec.ID)
	}
	pctx, stop := context.WithCancel(ctx)
	gapc := make(chan time.Duration, 1)
	go func() {
		var maxGap time.Duration
		last := time.Now()
		for pctx.Err() == nil {
			if _, err := a.Ping(pctx); err != nil {
				break
			}
			now := time.Now()
			maxGap = max(maxGap, now.Sub(last))
			last = now
			time.Sleep(500 * time.Microsecond)
		}
		gapc <- maxGap
	}()
	err := fn()
	// One more answer after the checkpoint proves the sandbox resumed and
	// closes the last gap.
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, perr := a.Ping(pingCtx)
	cancel()
	stop()
	gap := <-gapc
	if err == nil && perr != nil {
		err = fmt.Errorf("sandbox did not answer after the checkpoint: %w", perr)
	}
	return gap, err
}

// claimTag reserves a snapshot tag while it is being made.
func (s *Service) claimTag(tag string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.snapshots[tag]; ok {
		return nil, fmt.Errorf("%w: snapshot %q exists: pick another tag or delete it first", ErrConflict, tag)
	}
	// A placeholder holds the tag; it has no files, so nothing spawns from it.
	placeholder := &snap{rec: store.Snapshot{Tag: tag}}
	s.snapshots[tag] = placeholder
	released := false
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !released && s.snapshots[tag] == placeholder {
			delete(s.snapshots, tag)
		}
		released = true
	}, nil
}

func (s *Service) snapInfo(sn *snap) SnapshotInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapInfoLocked(sn)
}

func (s *Service) snapInfoLocked(sn *snap) SnapshotInfo {
	info := SnapshotInfo{Snapshot: sn.rec, PoolReady: len(sn.pool), Network: sn.net}
	for _, b := range s.boxes {
		if b.rec.SnapshotTag == sn.rec.Tag {
			info.Children++
		}
	}
	return info
}

// Snapshots lists every snapshot ctx's caller may see, oldest first.
func (s *Service) Snapshots(ctx context.Context) []SnapshotInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SnapshotInfo, 0, len(s.snapshots))
	for _, sn := range s.snapshots {
		if sn.ready && !HiddenTag(sn.rec.Tag) && sn.visible(ctx) {
			out = append(out, s.snapInfoLocked(sn))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].Tag < out[j].Tag
	})
	return out
}

// Snapshot describes one snapshot.
func (s *Service) Snapshot(ctx context.Context, tag string) (SnapshotInfo, error) {
	sn, err := s.snapshot(ctx, tag)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return s.snapInfo(sn), nil
}

// DeleteSnapshot removes a snapshot and its warm pool. It refuses while
// live sandboxes were spawned from it. Snapshots branched from its
// children are whole checkpoints of their own and need nothing from it.
func (s *Service) DeleteSnapshot(ctx context.Context, tag string) error {
	s.mu.Lock()
	sn := s.snapshots[tag]
	if sn == nil || !sn.ready || !sn.visible(ctx) {
		s.mu.Unlock()
		return fmt.Errorf("snapshot %q: %w", tag, ErrNotFound)
	}
	if !tenant.CanChange(ctx, sn.rec.Tenant) {
		s.mu.Unlock()
		return fmt.Errorf("%w: snapshot %q is the daemon's, shared by every tenant: only an admin key may delete it", ErrForbidden, tag)
	}
	if n := s.snapInfoLocked(sn).Children; n > 0 {
		s.mu.Unlock()
		return fmt.Errorf("%w: %d live sandboxes were spawned from snapshot %q: kill them first", ErrConflict, n, tag)
	}
	delete(s.snapshots, tag)
	pool := sn.pool
	sn.pool = nil
	s.mu.Unlock()
	for _, b := range pool {
		s.destroy(ctx, b)
	}
	if err := s.cfg.Store.DeleteSnapshot(ctx, tag); err != nil {
		return err
	}
	if err := os.RemoveAll(s.snapshotDir(tag)); err != nil {
		return fmt.Errorf("remove snapshot %s: %w", tag, err)
	}
	s.log.Info("snapshot deleted", "tag", tag)
	return nil
}

// recoverSnapshots loads snapshot records and drops what a crash left
// half done: checkpoint directories without a record and the reverse.
func (s *Service) recoverSnapshots(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.SnapshotDir, 0o700); err != nil {
		return err
	}
	recs, err := s.cfg.Store.Snapshots(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, rec := range recs {
		if rec.Pending {
			// Its branch never answered (its children are destroyed too).
			s.log.Info("dropping the snapshot of an unfinished branch", "tag", rec.Tag)
			s.cfg.Store.DeleteSnapshot(ctx, rec.Tag)
			continue
		}
		if _, err := os.Stat(s.snapshotDir(rec.Tag)); err != nil {
			s.log.Warn("snapshot lost its checkpoint; dropping it", "tag", rec.Tag)
			s.cfg.Store.DeleteSnapshot(ctx, rec.Tag)
			continue
		}
		_, files, err := s.cfg.Images.Resolve(rec.Image)
		if err != nil {
			s.log.Warn("snapshot's image is gone; it cannot be spawned", "tag", rec.Tag, "image", rec.Image)
		}
		known[rec.Tag] = true
		s.snapshots[rec.Tag] = &snap{rec: rec, files: files, ready: true, net: s.decodePolicy(rec.Tag, rec.NetworkJSON)}
	}
	ents, err := os.ReadDir(s.cfg.SnapshotDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !known[e.Name()] {
			s.log.Info("removing unfinished snapshot", "dir", e.Name())
			os.RemoveAll(filepath.Join(s.cfg.SnapshotDir, e.Name()))
		}
	}
	return nil
}

// share makes tag owner's: a golden snapshot saved before tenants existed
// is the default tenant's until the daemon shares it.
func (s *Service) share(ctx context.Context, tag, owner string) error {
	s.mu.Lock()
	sn := s.snapshots[tag]
	s.mu.Unlock()
	if sn == nil || sn.rec.Tenant == owner {
		return nil
	}
	if err := s.cfg.Store.SetSnapshotTenant(ctx, tag, owner); err != nil {
		return err
	}
	s.mu.Lock()
	sn.rec.Tenant = owner
	s.mu.Unlock()
	return nil
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// EnsureSnapshot makes sure a snapshot named tag exists and was built from
// the current version of image: it builds a missing one, and rebuilds a
// stale one unless sandboxes spawned from it still run.
func (s *Service) EnsureSnapshot(ctx context.Context, tag, image string) error {
	imageID, _, err := s.cfg.Images.Resolve(image)
	if err != nil {
		return fmt.Errorf("image %q: %w", image, ErrNotFound)
	}
	if cur, err := s.Snapshot(ctx, tag); err == nil {
		if cur.Image == imageID && cur.RuntimeVersion == s.runtimeVersion {
			return s.share(ctx, tag, snapshotOwner(ctx))
		}
		if cur.Children > 0 {
			s.log.Info("snapshot is older than its image or runtime but still has children; keeping it", "tag", tag)
			return nil
		}
		if err := s.DeleteSnapshot(ctx, tag); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if _, err := s.BuildSnapshot(ctx, BuildOptions{Tag: tag, Image: imageID, PoolSize: -1}); err != nil {
		return err
	}
	s.log.Info("snapshot built", "tag", tag, "image", imageID, "elapsed", time.Since(t0).Round(time.Millisecond))
	return nil
}
