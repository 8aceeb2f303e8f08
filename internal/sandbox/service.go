// Package sandbox is cove's service layer: it creates sandboxes on a
// runtime, keeps their durable record, enforces limits, tokens and expiry,
// and carries data-plane calls to each sandbox's agent. The REST API and the
// MCP server sit on top of it; runtimes sit below.
package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
)

// Status values of a sandbox.
const (
	StatusCreating = "creating"
	StatusRunning  = "running"
	StatusStopping = "stopping"
	StatusPooled   = "pooled"
	// StatusBuilding marks the sandbox a snapshot is being built in: it is
	// never handed to anyone, and a restart destroys it.
	StatusBuilding = "building"
)

// Images resolves an image name or id to its files.
type Images interface {
	Resolve(nameOrID string) (id string, files runtime.ImageFiles, err error)
}

// Limits bound what a request may ask for.
type Limits struct {
	DefaultTTL       time.Duration
	MaxTTL           time.Duration
	DefaultCPUs      int
	MaxCPUs          int
	DefaultMemoryMiB int
	MaxMemoryMiB     int
	MaxSandboxes     int // alive at once
}

// MinMemoryMiB is the least memory a sandbox may be given.
const MinMemoryMiB = 64

// MaxN bounds how many sandboxes one create call makes.
const MaxN = 1000

// Config configures a Service.
type Config struct {
	Runtime      runtime.Runtime
	Store        *store.Store
	Images       Images
	DefaultImage string
	Limits       Limits
	Logger       *slog.Logger
	// StartTimeout bounds how long a new sandbox's agent may take to answer.
	StartTimeout time.Duration
	// StartParallelism bounds concurrent starts within one create call.
	StartParallelism int
	// SnapshotDir holds one checkpoint directory per snapshot.
	SnapshotDir string
	// DefaultPoolSize is how many ready sandboxes a built snapshot keeps
	// restored when its creator does not say.
	DefaultPoolSize int
	// PoolMemoryMiB bounds the memory (as configured limits) of all pooled
	// sandboxes together.
	PoolMemoryMiB int
	// PoolRetry is how long the pool filler waits after a failed refill.
	PoolRetry time.Duration
}

// Service manages sandboxes.
type Service struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	boxes     map[string]*box
	reserved  int              // slots held by creates in progress
	snapshots map[string]*snap // by tag
	poolKick  chan struct{}

	stats Stats

	// runtimeVersion is what the runtime reports; snapshots record it,
	// because a checkpoint restores only under the version that wrote it.
	runtimeVersion string

	stopReaper context.CancelFunc
	reaperDone chan struct{}
	poolDone   chan struct{}
}

// Stats are counters for /metrics.
type Stats struct {
	Created   atomic.Int64
	Destroyed atomic.Int64
	Expired   atomic.Int64
	Execs     atomic.Int64
	Failures  atomic.Int64 // failed creates
	PoolHits  atomic.Int64 // sandboxes handed out from a warm pool
}

// box is a live sandbox.
type box struct {
	mu    sync.Mutex // guards rec.ExpiresAt, rec.Status and agent
	rec   store.Sandbox
	agent *agentproto.Client
	// ckptMu serialises checkpoints of this sandbox.
	ckptMu sync.Mutex
	// connMu serialises reconnecting to the agent.
	connMu sync.Mutex
}

// Info describes a sandbox. Token is set only by Create.
type Info struct {
	ID          string
	Status      string
	Backend     string
	Image       string
	SnapshotTag string
	CPUs        int
	MemoryMiB   int
	CreatedAt   time.Time
	ExpiresAt   time.Time
	Token       string
}

// New builds a Service. Call Recover before serving, then Close at the end.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.StartParallelism == 0 {
		cfg.StartParallelism = 8
	}
	if cfg.PoolRetry == 0 {
		cfg.PoolRetry = 5 * time.Second
	}
	return &Service{cfg: cfg, log: cfg.Logger, boxes: map[string]*box{}, snapshots: map[string]*snap{},
		poolKick: make(chan struct{}, 1)}
}

// Stats returns the service's counters.
func (s *Service) Stats() *Stats { return &s.stats }

// Limits returns the configured limits.
func (s *Service) Limits() Limits { return s.cfg.Limits }

// Backend names the runtime in use.
func (s *Service) Backend() string { return s.cfg.Runtime.Name() }

// CreateOptions are the inputs of Create. Zero values take defaults.
type CreateOptions struct {
	Image       string
	SnapshotTag string
	N           int
	TTL         time.Duration
	CPUs        int
	MemoryMiB   int
}

func (s *Service) validate(o *CreateOptions) error {
	l := s.cfg.Limits
	switch {
	case o.N < 0 || o.N > MaxN:
		return invalidf("n must be between 1 and %d, got %d", MaxN, o.N)
	case o.TTL < 0:
		return invalidf("ttl must not be negative")
	case o.TTL > l.MaxTTL:
		return invalidf("ttl %s exceeds the maximum of %s", o.TTL, l.MaxTTL)
	case o.CPUs < 0 || o.CPUs > l.MaxCPUs:
		return invalidf("cpus must be between 1 and %d, got %d", l.MaxCPUs, o.CPUs)
	case o.MemoryMiB != 0 && (o.MemoryMiB < MinMemoryMiB || o.MemoryMiB > l.MaxMemoryMiB):
		return invalidf("memory_mib must be between %d and %d, got %d", MinMemoryMiB, l.MaxMemoryMiB, o.MemoryMiB)
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
	if o.Image == "" {
		o.Image = s.cfg.DefaultImage
	}
	return nil
}

// Create starts o.N sandboxes, cold from an image or restored from a
// snapshot (taking ready ones from its warm pool first). It is all or
// nothing: if one fails to start, the others are destroyed.
func (s *Service) Create(ctx context.Context, o CreateOptions) ([]Info, error) {
	asked := o // before defaults: a snapshot's sandboxes run with its cpus and memory
	if err := s.validate(&o); err != nil {
		return nil, err
	}
	var src source
	if o.SnapshotTag != "" {
		sn, err := s.snapshot(o.SnapshotTag)
		if err != nil {
			return nil, err
		}
		if src, err = snapshotSource(s, sn); err != nil {
			return nil, err
		}
		if (asked.CPUs != 0 && asked.CPUs != src.cpus) || (asked.MemoryMiB != 0 && asked.MemoryMiB != src.memoryMiB) {
			return nil, invalidf("snapshot %q runs with %d cpus and %d MiB: spawn it without cpus and memory_mib", o.SnapshotTag, src.cpus, src.memoryMiB)
		}
	} else {
		imageID, files, err := s.cfg.Images.Resolve(o.Image)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w (build it with `cove image build`)", o.Image, ErrNotFound)
		}
		src = imageSource(s, imageID, files, o.CPUs, o.MemoryMiB)
	}
	if err := s.reserve(o.N); err != nil {
		return nil, err
	}
	defer s.release(o.N)

	out := make([]Info, o.N)
	errs := make([]error, o.N)
	sem := make(chan struct{}, s.cfg.StartParallelism)
	var wg sync.WaitGroup
	for i := range o.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b := src.pooled(); b != nil {
				out[i], errs[i] = s.handOut(ctx, b, o.TTL)
				return
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = s.createOne(ctx, o, src)
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

// source is where new sandboxes come from: an image or a snapshot.
type source struct {
	imageID, snapshotTag string
	// launch starts the sandbox described by spec.
	launch func(ctx context.Context, spec runtime.Spec) error
	files  runtime.ImageFiles
	// cpus and memoryMiB are what the sandboxes run with.
	cpus, memoryMiB int
	// pooled returns a ready sandbox from a warm pool, or nil.
	pooled func() *box
}

func imageSource(s *Service, imageID string, files runtime.ImageFiles, cpus, memoryMiB int) source {
	return source{imageID: imageID, files: files, cpus: cpus, memoryMiB: memoryMiB,
		launch: s.cfg.Runtime.Start, pooled: func() *box { return nil }}
}

func (s *Service) reserve(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if max := s.cfg.Limits.MaxSandboxes; len(s.boxes)+s.reserved+n > max {
		return fmt.Errorf("%w: %d sandboxes exist or are starting and the limit is %d: kill some first", ErrLimit, len(s.boxes)+s.reserved, max)
	}
	s.reserved += n
	return nil
}

func (s *Service) release(n int) {
	s.mu.Lock()
	s.reserved -= n
	s.mu.Unlock()
}

func (s *Service) createOne(ctx context.Context, o CreateOptions, src source) (Info, error) {
	token := newToken()
	b, err := s.launch(ctx, src, StatusRunning, o.TTL, hashToken(token))
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
	cpus, memMiB := src.cpus, src.memoryMiB
	now := time.Now()
	rec := store.Sandbox{
		ID: newID(), Status: StatusCreating, Backend: s.cfg.Runtime.Name(), Image: src.imageID,
		SnapshotTag: src.snapshotTag, CPUs: cpus, MemoryMiB: memMiB, TokenHash: tokenHash,
		CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	// The record comes first so that a daemon killed mid-start finds it and
	// cleans up after itself.
	if err := s.cfg.Store.PutSandbox(ctx, rec); err != nil {
		return nil, err
	}
	b := &box{rec: rec}
	spec := runtime.Spec{ID: rec.ID, ImageFiles: src.files, CPUs: cpus, MemoryMiB: memMiB, Hostname: rec.ID, Golden: status == StatusBuilding}
	// A restored sandbox's first call gives it its own identity: clones of
	// one snapshot share the interpreter's random state, the kernel's RNG,
	// the hostname and a stale clock. It doubles as the liveness check, so
	// a clone answers once, not twice, before it is handed out.
	first := ping
	if src.snapshotTag != "" {
		seed := make([]byte, 64)
		rand.Read(seed)
		restored := agentproto.RestoredRequest{SandboxID: rec.ID, Hostname: rec.ID, Seed: seed}
		first = func(ctx context.Context, c *agentproto.Client) error {
			restored.TimeUnixNano = time.Now().UnixNano()
			return c.Restored(ctx, restored)
		}
	}
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

// awaitAgent waits for a new sandbox's agent to answer first.
func (s *Service) awaitAgent(ctx context.Context, b *box, first func(context.Context, *agentproto.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(delay*2, 20*time.Millisecond) {
		c, err := s.connectWith(ctx, b.rec.ID, first)
		if err == nil {
			b.agent = c
			return nil
		}
		if errors.Is(err, runtime.ErrExited) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: agent did not answer within %s: %v", ErrUnavailable, s.cfg.StartTimeout, err)
		case <-time.After(delay):
		}
	}
}

// connect dials the agent and checks that it answers.
func (s *Service) connect(ctx context.Context, id string) (*agentproto.Client, error) {
	return s.connectWith(ctx, id, ping)
}

func ping(ctx context.Context, c *agentproto.Client) error {
	_, err := c.Ping(ctx)
	return err
}

// connectWith dials the agent and makes first its first call.
func (s *Service) connectWith(ctx context.Context, id string, first func(context.Context, *agentproto.Client) error) (*agentproto.Client, error) {
	conn, err := s.cfg.Runtime.Dial(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err := agentproto.NewClient(conn)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := first(pctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (b *box) info() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rec
	return Info{ID: r.ID, Status: r.Status, Backend: r.Backend, Image: r.Image, SnapshotTag: r.SnapshotTag,
		CPUs: r.CPUs, MemoryMiB: r.MemoryMiB, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}

func (b *box) expired(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !now.Before(b.rec.ExpiresAt)
}

// lookup returns a live, unexpired sandbox.
func (s *Service) lookup(id string) (*box, error) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil || b.expired(time.Now()) {
		return nil, fmt.Errorf("sandbox %q: %w (it may have expired or been killed; list sandboxes with GET /v1/sandboxes)", id, ErrNotFound)
	}
	return b, nil
}

// Get describes one sandbox.
func (s *Service) Get(id string) (Info, error) {
	b, err := s.lookup(id)
	if err != nil {
		return Info{}, err
	}
	return b.info(), nil
}

// List describes every live sandbox, oldest first.
func (s *Service) List() []Info {
	s.mu.Lock()
	out := make([]Info, 0, len(s.boxes))
	for _, b := range s.boxes {
		out = append(out, b.info())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Count returns how many sandboxes are live.
func (s *Service) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.boxes)
}

// Extend makes the sandbox expire ttl from now.
func (s *Service) Extend(ctx context.Context, id string, ttl time.Duration) (Info, error) {
	if ttl <= 0 || ttl > s.cfg.Limits.MaxTTL {
		return Info{}, invalidf("ttl must be between 1s and %s", s.cfg.Limits.MaxTTL)
	}
	b, err := s.lookup(id)
	if err != nil {
		return Info{}, err
	}
	exp := time.Now().Add(ttl)
	if err := s.cfg.Store.SetExpiry(ctx, id, exp); err != nil {
		return Info{}, err
	}
	b.mu.Lock()
	b.rec.ExpiresAt = exp
	b.mu.Unlock()
	return b.info(), nil
}

// Delete destroys a sandbox and everything in it.
func (s *Service) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	b := s.boxes[id]
	delete(s.boxes, id)
	s.mu.Unlock()
	if b == nil {
		return fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	return s.destroy(ctx, b)
}

// destroy tears a sandbox down. Its record goes last, so a failure (or a
// daemon killed midway) leaves it to be retried at the next start.
func (s *Service) destroy(ctx context.Context, b *box) error {
	id := b.rec.ID
	b.mu.Lock()
	if b.agent != nil {
		b.agent.Close()
		b.agent = nil
	}
	b.rec.Status = StatusStopping
	b.mu.Unlock()
	if err := s.cfg.Store.SetStatus(ctx, id, StatusStopping); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("mark sandbox stopping", "id", id, "err", err)
	}
	if err := s.cfg.Runtime.Destroy(ctx, id); err != nil {
		s.log.Error("destroy sandbox", "id", id, "err", err)
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	if err := s.cfg.Store.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	s.stats.Destroyed.Add(1)
	s.log.Info("sandbox destroyed", "id", id)
	return nil
}

func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

func newToken() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func hashToken(t string) string {
	h := sha256.Sum256([]byte(t))
	return hex.EncodeToString(h[:])
}

func tokenMatches(hash, token string) bool {
	got := hashToken(token)
	return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1
}
