// Package sandbox is cove's service layer: it creates sandboxes on a
// runtime, keeps their durable record, enforces limits, tokens and expiry,
// and carries data-plane calls to each sandbox's agent. The REST API and the
// MCP server sit on top of it; runtimes sit below.
package sandbox

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/hostres"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Status values of a sandbox: those a client may see are the API's.
const (
	StatusCreating = apitype.StatusCreating
	StatusRunning  = apitype.StatusRunning
	StatusStopping = apitype.StatusStopping
	StatusPooled   = apitype.StatusPooled
	StatusDead     = apitype.StatusDead
	StatusPausing  = apitype.StatusPausing
	StatusPaused   = apitype.StatusPaused
	StatusResuming = apitype.StatusResuming
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
	DefaultDiskMiB   int
	MaxDiskMiB       int
	DefaultPids      int
	MaxPids          int
	OpenFiles        int // per process, in every sandbox
	// MemoryBudgetMiB bounds the memory limits of all sandboxes together:
	// live ones, warm pools, snapshot builders and creates in progress.
	// Zero is no bound.
	MemoryBudgetMiB int
	// HostMemoryFloorMiB is the host memory (MemAvailable) a create must
	// leave free, by Config.HostCost's estimate; zero is none.
	HostMemoryFloorMiB int64
}

// inSecs is d in whole seconds: errors about lifetimes name ttl_secs, the
// field every client gives them in, as others name cpus and memory_mib.
func inSecs(d time.Duration) int64 { return int64(d / time.Second) }

// The least a sandbox may be given.
const (
	MinMemoryMiB = 64
	MinDiskMiB   = 64
	// MinPids leaves room for a shell and what it runs beside the agent,
	// whose threads count too.
	MinPids      = 64
	MinOpenFiles = 64
)

// MaxN bounds how many sandboxes one create call makes.
const MaxN = apitype.MaxN

// Config configures a Service.
type Config struct {
	Runtime      runtime.Runtime
	Store        *store.Store
	Images       Images
	DefaultImage string
	Limits       Limits
	Logger       *slog.Logger
	// Host, if set, looks at the host's memory and tasks: a create is
	// refused when its sandboxes, at HostCost each, would not fit (the
	// memory floor, kernel.pid_max). A failed look admits the create.
	Host     func() (hostres.Reading, error)
	HostCost hostres.Cost
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
	// DeadKeep is how long a dead sandbox stays listed, with why it died,
	// before it is forgotten (never past its expiry).
	DeadKeep time.Duration
	// Network enforces egress policies; nil gives sandboxes no network.
	Network Network
	// PausedDir holds a paused sandbox's saved state, CheckpointDir its
	// named checkpoints, one directory per sandbox; "": beside SnapshotDir.
	PausedDir, CheckpointDir string
	// Meter is told when sandboxes start and stop running (meter.go); nil
	// meters nothing.
	Meter Meter
	// TokenSealKey (32 bytes) seals each new sandbox's token into the
	// store, so RevealToken can give it again (sealtoken.go); nil keeps
	// only its hash, as before.
	TokenSealKey []byte
}

// Service manages sandboxes.
type Service struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	boxes     map[string]*box  // live sandboxes, each holding a slot
	dead      map[string]*box  // dead ones, listed until DeadKeep has passed
	reserved  int              // slots held by creates in progress
	snapshots map[string]*snap // by tag
	poolKick  chan struct{}
	// reservedMiB is the memory (as limits) held by creates in progress.
	reservedMiB int
	// held is what creates in progress hold by tenant, for its quotas.
	held map[string]hold

	stats Stats

	// runtimeVersion is what the runtime reports; snapshots record it,
	// because a checkpoint restores only under the version that wrote it.
	runtimeVersion string

	// bg is the service's own lifetime, which Close ends: every box's
	// life, and the background work, derive from it.
	bg     context.Context
	stopBG context.CancelFunc

	reaperDone chan struct{}
	poolDone   chan struct{}
	// recovered is closed once Recover's checks are done; recovering
	// counts those left.
	recovered  chan struct{}
	recovering atomic.Int64
	watchers   sync.WaitGroup // watch goroutines

	// dialIn connects from inside a network namespace: netns.Dial, which
	// tests replace.
	dialIn func(ctx context.Context, ns, addr string) (net.Conn, error)
	// warmLog is where a snapshot builder's warm command writes its
	// output (warm.go); tests, whose fake sandboxes share the host's
	// files, keep it in the sandbox's directory.
	warmLog string
}

// Stats are counters for /metrics.
type Stats struct {
	Created   atomic.Int64
	Destroyed atomic.Int64
	Expired   atomic.Int64
	Execs     atomic.Int64
	Failures  atomic.Int64 // failed creates
	PoolHits  atomic.Int64 // sandboxes handed out from a warm pool
	Died      atomic.Int64 // sandboxes found dead
}

// box is a sandbox the service knows: live, pooled, or dead.
type box struct {
	mu    sync.Mutex // guards rec.ExpiresAt, rec.Status, rec.NetworkJSON, agent, checking, exit, death, net and ports
	rec   store.Sandbox
	agent *agentproto.Client
	// net is its egress policy, never changed in place; ports its exposed
	// ports. netMu serialises their changes.
	net   netpolicy.Policy
	ports map[int]PortInfo
	netMu sync.Mutex
	// checking is set while a restarted daemon checks the sandbox: calls
	// to it are refused with ErrRetry until it is re-attached or dead.
	checking bool
	// exit is how its runtime process ended, once the watch saw it.
	exit *runtime.Exit
	// death is why and when a dead sandbox died.
	death store.Death
	// teardownMu serialises the runtime's teardown of the sandbox (a
	// death's, a delete's); released says it is done.
	teardownMu sync.Mutex
	released   bool
	// life ends when the sandbox leaves for good (dead, destroyed) or the
	// service closes; it bounds the watch and a re-attach.
	life context.Context
	end  context.CancelFunc
	// kick wakes a watch that could not follow the runtime process: the
	// agent connection ended.
	kick chan struct{}
	// ckptMu serialises checkpoints of this sandbox.
	ckptMu sync.Mutex
	// connMu serialises reconnecting to the agent.
	connMu sync.Mutex
	// watchDone is closed when its current watch has ended (pause.go).
	watchDone chan struct{}
	// ckpts are its checkpoints, oldest first; guarded by mu.
	ckpts []store.Checkpoint
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
	DiskMiB     int
	Pids        int
	CreatedAt   time.Time
	ExpiresAt   time.Time
	Token       string
	// DeadReason (apitype.Dead*) and DiedAt are set for a dead sandbox.
	DeadReason string
	DiedAt     time.Time
	// Network is its egress policy; Ports its exposed ports, in order.
	Network netpolicy.Policy
	Ports   []PortInfo
	Labels  map[string]string
	User    string // default user; "": root
	// Env and Cwd are what every process started in it gets by default.
	Env map[string]string
	Cwd string
	// AutoResume and OnExpiry are its pause policy; a paused one has
	// PausedAt, Remaining (its lifetime, standing still) and PausedBytes.
	// CheckpointBytes is the disk its checkpoints take.
	AutoResume      bool
	OnExpiry        string
	PausedAt        time.Time
	Remaining       time.Duration
	PausedBytes     int64
	CheckpointBytes int64
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
	if cfg.Meter == nil {
		cfg.Meter = noMeter{}
	}
	if cfg.DeadKeep == 0 {
		cfg.DeadKeep = 10 * time.Minute
	}
	if cfg.PausedDir == "" {
		cfg.PausedDir = filepath.Join(filepath.Dir(cfg.SnapshotDir), "paused")
	}
	if cfg.CheckpointDir == "" {
		cfg.CheckpointDir = filepath.Join(filepath.Dir(cfg.SnapshotDir), "checkpoints")
	}
	bg, stop := context.WithCancel(context.Background())
	return &Service{cfg: cfg, log: cfg.Logger, boxes: map[string]*box{}, dead: map[string]*box{}, snapshots: map[string]*snap{},
		held: map[string]hold{}, poolKick: make(chan struct{}, 1), bg: bg, stopBG: stop, recovered: make(chan struct{}),
		dialIn: netns.Dial, warmLog: defaultWarmLog}
}

// newBox makes the box of a sandbox recorded as rec.
func (s *Service) newBox(rec store.Sandbox) *box {
	life, end := context.WithCancel(s.bg)
	return &box{rec: rec, life: life, end: end, kick: make(chan struct{}, 1), net: s.decodePolicy(rec.ID, rec.NetworkJSON)}
}

// Stats returns the service's counters.
func (s *Service) Stats() *Stats { return &s.stats }

// Backend names the runtime in use.
func (s *Service) Backend() string { return s.cfg.Runtime.Name() }

func (b *box) info() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rec
	info := Info{ID: r.ID, Status: r.Status, Backend: r.Backend, Image: r.Image, SnapshotTag: r.SnapshotTag,
		CPUs: r.CPUs, MemoryMiB: r.MemoryMiB, DiskMiB: r.DiskMiB, Pids: r.Pids, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		DeadReason: b.death.Reason, DiedAt: b.death.At, Network: b.net, Ports: b.portsLocked(),
		Labels: decodeLabels(r.LabelsJSON), User: r.User, Env: envMap(r.EnvJSON), Cwd: r.Cwd}
	b.pauseInfoLocked(&info)
	return info
}

// expired reports whether the sandbox's time is up: its expiry, or for a
// dead one keep after it died if that comes first.
func (b *box) expired(now time.Time, keep time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.Status == StatusDead && !now.Before(b.death.At.Add(keep)) {
		return true
	}
	if standsStill(b.rec.Status) || b.pausesAtExpiryLocked() { // paused, not gone, at its end (pause.go)
		return false
	}
	return !now.Before(b.rec.ExpiresAt)
}

// lookup returns an unexpired sandbox, live or dead, that ctx's caller may
// see: another tenant's is not found, in the same words as an unknown id.
func (s *Service) lookup(ctx context.Context, id string) (*box, error) {
	s.mu.Lock()
	b := s.boxes[id]
	if b == nil {
		b = s.dead[id]
	}
	s.mu.Unlock()
	if b == nil || !b.visible(ctx) || b.expired(time.Now(), s.cfg.DeadKeep) {
		return nil, fmt.Errorf("sandbox %q: %w", id, ErrNoSandbox)
	}
	return b, nil
}

// Get describes one sandbox.
func (s *Service) Get(ctx context.Context, id string) (Info, error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return Info{}, err
	}
	return b.info(), nil
}

// List describes every sandbox ctx's caller may see, live or dead, oldest
// first.
func (s *Service) List(ctx context.Context) []Info {
	s.mu.Lock()
	out := make([]Info, 0, len(s.boxes)+len(s.dead))
	for _, m := range []map[string]*box{s.boxes, s.dead} {
		for _, b := range m {
			if b.visible(ctx) {
				out = append(out, b.info())
			}
		}
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
	switch max := s.cfg.Limits.MaxTTL; {
	case ttl <= 0:
		return Info{}, invalidf("ttl_secs must be positive")
	case ttl > max:
		return Info{}, invalidf("ttl_secs must be at most %d", inSecs(max))
	}
	if err := checkTTLQuota(ctx, ttl); err != nil {
		return Info{}, err
	}
	b, err := s.lookup(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if err := b.deadErr(); err != nil {
		return Info{}, err
	}
	if b.paused() { // its lifetime stands still: a resume takes ttl_secs
		return Info{}, fmt.Errorf("%w: sandbox %s is paused: resume it (resume takes a ttl_secs of its own)", ErrPaused, id)
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
	if b == nil {
		b = s.dead[id]
	}
	if b == nil || !b.visible(ctx) {
		s.mu.Unlock()
		return fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	delete(s.boxes, id)
	delete(s.dead, id)
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
	b.end()
	if err := s.cfg.Store.SetStatus(ctx, id, StatusStopping); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("mark sandbox stopping", "id", id, "err", err)
	}
	if err := s.teardown(ctx, b); err != nil {
		s.log.Error("destroy sandbox", "id", id, "err", err)
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	if err := s.removeSaved(b); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	if err := s.cfg.Store.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	s.cfg.Meter.Gone(id)
	s.stats.Destroyed.Add(1)
	s.kickPool() // a pool may have waited for its memory
	s.log.Info("sandbox destroyed", "id", id)
	return nil
}

// teardown has the runtime let go of everything it holds for b, once: a
// dead sandbox's went when it died.
func (s *Service) teardown(ctx context.Context, b *box) error {
	s.cfg.Meter.Stopped(ctx, b.rec.ID) // while the runtime still holds its link
	b.teardownMu.Lock()
	defer b.teardownMu.Unlock()
	if b.released {
		return nil
	}
	// The listeners first: the namespace they serve goes with the sandbox.
	// Under netMu, so that no policy change attaches them again.
	b.netMu.Lock()
	s.detachNetwork(b)
	b.netMu.Unlock()
	if err := s.cfg.Runtime.Destroy(ctx, b.rec.ID); err != nil {
		return err
	}
	b.released = true
	return nil
}

func newID() string { return "sb-" + randhex.New(6) }

func newToken() string { return randhex.New(24) }

func hashToken(t string) string {
	h := sha256.Sum256([]byte(t))
	return hex.EncodeToString(h[:])
}

func tokenMatches(hash, token string) bool {
	got := hashToken(token)
	return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1
}
