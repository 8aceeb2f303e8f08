package template

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

// Config configures a Manager.
type Config struct {
	Service *sandbox.Service
	Store   *store.Store
	// TmpDir holds spooled build contexts ("": the system's).
	TmpDir string
	// ResolveFrom turns a FROM reference that names no local image (a
	// registry reference) into a local image's name, pulling it; nil: such
	// a FROM is refused.
	ResolveFrom func(ctx context.Context, ref string) (imageName string, err error)
	Logger      *slog.Logger
}

// Manager builds, lists and deletes templates.
type Manager struct {
	cfg Config
	svc *sandbox.Service
	log *slog.Logger

	mu       sync.Mutex
	building map[string]bool // names with a build or delete in flight
}

// New returns a Manager.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{cfg: cfg, svc: cfg.Service, log: cfg.Logger, building: map[string]bool{}}
}

// BuildOptions are the inputs of Build.
type BuildOptions struct {
	Name string
	// Dockerfile is the Dockerfile; nil: the context's entry at
	// DockerfilePath ("": "Dockerfile").
	Dockerfile     []byte
	DockerfilePath string
	BuildArgs      map[string]string
	Context        io.Reader // a tar stream; nil for none
	// Start runs in the background and Ready (a shell command) is retried
	// until it succeeds, before the template's snapshot is saved.
	Start, Ready string
	// Network is the egress policy RUN steps have, and the template's
	// sandboxes; nil denies all.
	Network                  *netpolicy.Policy
	CPUs, MemoryMiB, DiskMiB int
	// PoolSize is the template's warm pool; -1: the daemon's default.
	PoolSize int
	// Progress gets the build's events as they happen (may be nil).
	Progress func(Event)
}

// Event is one progress record of a build: a step starting (Step) or
// output of a RUN (Output).
type Event struct {
	Step   *StepEvent `json:"step,omitempty"`
	Output string     `json:"output,omitempty"`
}

// StepEvent is a step starting: N of Total, its Dockerfile line, and
// whether its cache is used.
type StepEvent struct {
	N      int    `json:"n"`
	Total  int    `json:"total"`
	Line   int    `json:"line,omitempty"`
	Text   string `json:"text"`
	Cached bool   `json:"cached"`
}

// StepRecord is one step of a built template.
type StepRecord struct {
	Line int    `json:"line,omitempty"`
	Text string `json:"text"`
	Tag  string `json:"tag,omitempty"` // its cache
}

// Info describes a template.
type Info struct {
	Name      string
	Base      string // the FROM reference
	Image     string // the image id it resolved to
	Digest    string // sha256:... of the Dockerfile
	Steps     []StepRecord
	BuildTime time.Duration
	CreatedAt time.Time
	// SizeBytes is its snapshot's and its step caches' together.
	SizeBytes int64
	// Cached says the build found every step cached and changed nothing.
	Cached   bool
	Snapshot *sandbox.SnapshotInfo // nil when its snapshot is gone
}

// MaxName bounds a template name, which its caches' tags extend.
const MaxName = 40

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

func validName(name string) error {
	if len(name) > MaxName || !nameRE.MatchString(name) {
		return fmt.Errorf("%w: template name %q: use 1-%d letters, digits, '_' or '-', starting with a letter or digit", ErrInvalid, name, MaxName)
	}
	return nil
}

// claim marks name busy for a build or delete.
func (m *Manager) claim(name string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.building[name] {
		return nil, fmt.Errorf("%w: template %q is being built or deleted", sandbox.ErrConflict, name)
	}
	m.building[name] = true
	return func() {
		m.mu.Lock()
		delete(m.building, name)
		m.mu.Unlock()
	}, nil
}

func hashOf(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		b, _ := json.Marshal(p) // plain data: cannot fail
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// planned is a step with its cache key and, for a COPY, what it writes.
type planned struct {
	Step
	key  string
	tag  string // "" for a step that keeps no snapshot
	copy copySet
}

func (m *Manager) stepTag(name, key string) string { return name + sandbox.StepMarker + key[:16] }

// Build builds a template from a Dockerfile. Steps whose cache exists are
// not run again; a failing step ends the build naming its line, and
// leaves the previous version of the template as it was.
func (m *Manager) Build(ctx context.Context, o BuildOptions) (Info, error) {
	t0 := time.Now()
	if err := validName(o.Name); err != nil {
		return Info{}, err
	}
	release, err := m.claim(o.Name)
	if err != nil {
		return Info{}, err
	}
	defer release()
	if o.Network == nil {
		// Never the policy a cached step was saved with by another build.
		o.Network = &netpolicy.Policy{}
	}
	dfPath := ""
	if o.Dockerfile == nil {
		dfPath = cmp.Or(o.DockerfilePath, "Dockerfile")
	}
	bctx, err := ReadContext(o.Context, m.cfg.TmpDir, dfPath)
	if err != nil {
		return Info{}, err
	}
	defer bctx.Close()
	if o.Dockerfile == nil {
		o.Dockerfile = bctx.Dockerfile()
	}
	plan, err := Parse(o.Dockerfile, o.BuildArgs)
	if err != nil {
		return Info{}, err
	}
	imageName, imageID, err := m.resolveFrom(ctx, plan)
	if err != nil {
		return Info{}, err
	}
	b := &build{m: m, o: o, plan: plan, ctx: bctx, imageName: imageName}
	if err := b.prepare(imageID); err != nil {
		return Info{}, err
	}
	prev, hadPrev, err := m.cfg.Store.GetTemplate(ctx, o.Name)
	if err != nil {
		return Info{}, err
	}
	// Names are one namespace, as snapshot tags are: another tenant's
	// template is a taken name, whose owner is not said.
	if hadPrev && !tenant.CanSee(ctx, prev.Tenant) {
		return Info{}, fmt.Errorf("%w: template %q exists: pick another name", sandbox.ErrConflict, o.Name)
	}
	if hadPrev && !tenant.CanChange(ctx, prev.Tenant) {
		return Info{}, fmt.Errorf("%w: template %q is the daemon's, shared by every tenant: only an admin key may rebuild it", sandbox.ErrForbidden, o.Name)
	}
	b.prev = prev
	owner := tenant.Owner(ctx, tenant.Shared)
	if hadPrev {
		owner = prev.Tenant // an admin's rebuild keeps its owner
	}
	rec := store.Template{Name: o.Name, Base: plan.From, Image: imageID,
		Digest: "sha256:" + hex.EncodeToString(sha256Sum(o.Dockerfile)), Key: b.finalKey, Tenant: owner}
	if hadPrev && prev.Key == b.finalKey && m.svc.Spawnable(ctx, o.Name) {
		b.reportAllCached()
		info, err := m.Get(ctx, o.Name)
		info.Cached = true
		return info, err
	}
	if _, err := m.svc.Snapshot(context.Background(), o.Name); err == nil && !hadPrev { // anyone's: tags are one namespace
		return Info{}, fmt.Errorf("%w: snapshot %q exists and is not a template: delete it or pick another name", sandbox.ErrConflict, o.Name)
	}
	if si, err := m.svc.Snapshot(ctx, o.Name); err == nil && si.Children > 0 {
		return Info{}, fmt.Errorf("%w: %d live sandboxes were spawned from template %q: kill them before rebuilding it", sandbox.ErrConflict, si.Children, o.Name)
	}
	if err := b.run(ctx); err != nil {
		b.cleanup(context.WithoutCancel(ctx))
		return Info{}, err
	}
	steps := b.records()
	sj, _ := json.Marshal(steps)
	rec.StepsJSON, rec.BuildTime, rec.CreatedAt = string(sj), time.Since(t0), time.Now()
	if err := m.cfg.Store.PutTemplate(ctx, rec); err != nil {
		return Info{}, err
	}
	m.prune(context.WithoutCancel(ctx), o.Name, steps)
	m.log.Info("template built", "name", o.Name, "steps", len(steps), "elapsed", rec.BuildTime.Round(time.Millisecond))
	return m.Get(ctx, o.Name)
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// resolveFrom finds the image FROM names: cove:NAME, a local image's
// name, or a reference the ResolveFrom hook pulls.
func (m *Manager) resolveFrom(ctx context.Context, p *Plan) (name, id string, err error) {
	ref := p.From
	if n, ok := strings.CutPrefix(ref, "cove:"); ok {
		id, err := m.svc.ImageID(n)
		if err != nil {
			return "", "", lineErr(p.FromLine, "FROM %s: cove has no image %q (list them with cove image ls)", ref, n)
		}
		return n, id, nil
	}
	if id, err := m.svc.ImageID(ref); err == nil {
		return ref, id, nil
	}
	if m.cfg.ResolveFrom == nil {
		return "", "", lineErr(p.FromLine, "FROM %s: no local image of that name: pull it first: cove image pull %s", ref, ref)
	}
	n, err := m.cfg.ResolveFrom(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("Dockerfile line %d: FROM %s: %w", p.FromLine, ref, err)
	}
	if id, err = m.svc.ImageID(n); err != nil {
		return "", "", fmt.Errorf("Dockerfile line %d: FROM %s: %w", p.FromLine, ref, err)
	}
	return n, id, nil
}

// prune removes the caches of the template's earlier builds that this one
// no longer uses.
func (m *Manager) prune(ctx context.Context, name string, keep []StepRecord) {
	want := map[string]bool{}
	for _, s := range keep {
		want[s.Tag] = true
	}
	for _, tag := range m.svc.HiddenSnapshots(name) {
		if !want[tag] {
			if err := m.svc.DeleteSnapshot(ctx, tag); err != nil {
				m.log.Warn("remove a template's old step cache", "tag", tag, "err", err)
			}
		}
	}
}

// randTag is the tag a build's result is saved under before it takes its name.
func randTag(name string) string { return name + sandbox.BuildMarker + randhex.New(4) }
