// Package keys manages the daemon's API keys: an admin creates, lists and
// revokes them; each names a tenant, and resolves to the tenant.Principal
// the API puts in a request's context. Only a key's SHA-256 is stored; the
// secret is shown once, when it is made. The daemon's own key (its token
// file) is the bootstrap key: the admin key of the default tenant, so a
// daemon nobody made keys for works as it always did.
package keys

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

var (
	// ErrInvalid is a request that cannot be honoured as given.
	ErrInvalid = errors.New("invalid key request")
	// ErrNotFound is an unknown key id.
	ErrNotFound = errors.New("key not found")
	// ErrUnauthorized is a key that opens nothing: unknown or revoked,
	// on purpose the same error for both.
	ErrUnauthorized = errors.New("wrong or revoked API key")
	// ErrRevoked is the cause of the contexts Revoke cancels.
	ErrRevoked = errors.New("the API key was revoked")
)

// BootstrapID is the id of the daemon's own key.
const BootstrapID = "bootstrap"

// E2BPrefix may precede a key: the E2B SDK's keys start with it, so
// "e2b_" + key is the same key.
const E2BPrefix = "e2b_"

// MaxQuota bounds every quota value; anything larger is a mistake, not a
// limit.
const MaxQuota = math.MaxInt32

// MaxNameLen bounds a key's name.
const MaxNameLen = 128

// tenantName is what a tenant may be called: it shows in labels, paths
// and logs, so it is kept to a DNS label's alphabet.
var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Store is the part of *store.Store the manager uses.
type Store interface {
	PutKey(ctx context.Context, k store.Key) error
	RevokeKey(ctx context.Context, id string, t time.Time) error
	Keys(ctx context.Context) ([]store.Key, error)
}

// Config configures a Manager.
type Config struct {
	Store Store
	// Bootstrap is the daemon's own key, from its token file ("": none).
	Bootstrap string
	Logger    *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Key is a key as listed: everything but its secret and its hash.
type Key struct {
	ID           string
	Name         string
	Tenant       string
	Admin        bool
	RevealTokens bool
	Limits       tenant.Limits
	CreatedAt    time.Time
	RevokedAt    time.Time // zero while live
}

// CreateOptions is what a new key is made with.
type CreateOptions struct {
	Name   string
	Tenant string
	Admin  bool
	Limits tenant.Limits
	// HideTokens switches reveal_tokens off: the key is never given a
	// sandbox's token after create. Off by default, so a tenant's own key
	// may connect as E2B's SDK does.
	HideTokens bool
}

// Manager resolves, creates and revokes keys. Live keys are held in
// memory by hash, so Resolve never touches the database.
type Manager struct {
	st   Store
	boot string
	log  *slog.Logger
	now  func() time.Time

	mu       sync.Mutex
	live     map[string]store.Key // by hash
	inflight map[string]map[uint64]context.CancelCauseFunc
	seq      uint64
	onRevoke []func(id string)
}

// New loads the live keys from the store.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	all, err := cfg.Store.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("keys: load: %w", err)
	}
	m := &Manager{st: cfg.Store, boot: cfg.Bootstrap, log: cfg.Logger, now: cfg.Now,
		live: make(map[string]store.Key), inflight: make(map[string]map[uint64]context.CancelCauseFunc)}
	for _, k := range all {
		if k.RevokedAt.IsZero() {
			m.live[k.Hash] = k
		}
	}
	return m, nil
}

// Hash is the stored form of a key's secret: hex SHA-256.
func Hash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Resolve returns the principal key stands for, or ErrUnauthorized.
func (m *Manager) Resolve(key string) (tenant.Principal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resolveLocked(key)
}

func (m *Manager) resolveLocked(key string) (tenant.Principal, error) {
	for _, k := range candidates(key) {
		if subtle.ConstantTimeCompare([]byte(k), []byte(m.boot)) == 1 {
			return tenant.Principal{KeyID: BootstrapID, KeyName: BootstrapID, Tenant: tenant.Default, Admin: true, RevealTokens: true}, nil
		}
		if rec, ok := m.live[Hash(k)]; ok {
			return principal(rec), nil
		}
	}
	return tenant.Principal{}, ErrUnauthorized
}

// candidates are the secrets key may be: itself, and itself less the E2B
// prefix.
func candidates(key string) []string {
	if key == "" {
		return nil
	}
	if rest, ok := strings.CutPrefix(key, E2BPrefix); ok && rest != "" {
		return []string{key, rest}
	}
	return []string{key}
}

func principal(k store.Key) tenant.Principal {
	return tenant.Principal{KeyID: k.ID, KeyName: k.Name, Tenant: k.Tenant, Admin: k.Admin, Limits: limitsOf(k.Quota),
		RevealTokens: k.RevealTokens}
}

// Authenticate resolves key and derives from ctx a context that Revoke of
// that key cancels, carrying the principal. Release it when the request
// is done. Resolving and registering happen under one lock, so a request
// let in just before a revocation is cancelled by it, never missed.
func (m *Manager) Authenticate(ctx context.Context, key string) (context.Context, tenant.Principal, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.resolveLocked(key)
	if err != nil {
		return ctx, p, func() {}, err
	}
	ctx = tenant.NewContext(ctx, p)
	if p.KeyID == BootstrapID {
		return ctx, p, func() {}, nil // never revoked
	}
	ctx, cancel := context.WithCancelCause(ctx)
	m.seq++
	n := m.seq
	set := m.inflight[p.KeyID]
	if set == nil {
		set = make(map[uint64]context.CancelCauseFunc)
		m.inflight[p.KeyID] = set
	}
	set[n] = cancel
	release := func() {
		m.mu.Lock()
		if set := m.inflight[p.KeyID]; set != nil {
			delete(set, n)
			if len(set) == 0 {
				delete(m.inflight, p.KeyID)
			}
		}
		m.mu.Unlock()
		cancel(nil)
	}
	return ctx, p, release, nil
}

// InFlight is how many requests authenticated by key id are open.
func (m *Manager) InFlight(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.inflight[id])
}

// OnRevoke adds f, called with a key's id after it is revoked (for what
// outlives a request, such as MCP sessions).
func (m *Manager) OnRevoke(f func(id string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onRevoke = append(m.onRevoke, f)
}

// Create makes a new key and returns it with its secret, which is not kept.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (Key, string, error) {
	if err := validate(o); err != nil {
		return Key{}, "", err
	}
	secret := randhex.New(32)
	rec := store.Key{Name: o.Name, Tenant: o.Tenant, Admin: o.Admin, Hash: Hash(secret), Quota: quotaOf(o.Limits),
		RevealTokens: !o.HideTokens,
		CreatedAt:    time.UnixMilli(m.now().UnixMilli())}
	// Ids are short enough to read out, so a collision is possible if
	// unlikely: try another.
	var err error
	for range 5 {
		rec.ID = "key-" + randhex.New(6)
		if err = m.st.PutKey(ctx, rec); !errors.Is(err, store.ErrExists) {
			break
		}
	}
	if err != nil {
		return Key{}, "", fmt.Errorf("keys: create: %w", err)
	}
	m.mu.Lock()
	m.live[rec.Hash] = rec
	m.mu.Unlock()
	m.log.InfoContext(ctx, "API key created", "key", rec.ID, "name", rec.Name, "tenant", rec.Tenant, "admin", rec.Admin)
	return keyOf(rec), secret, nil
}

// List returns every key, revoked ones too, oldest first.
func (m *Manager) List(ctx context.Context) ([]Key, error) {
	all, err := m.st.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("keys: list: %w", err)
	}
	out := make([]Key, len(all))
	for i, k := range all {
		out[i] = keyOf(k)
	}
	return out, nil
}

// Revoke makes key id stop working at once, and cancels every request
// and stream it opened. Revoking a revoked key again is no error.
func (m *Manager) Revoke(ctx context.Context, id string) error {
	if id == BootstrapID {
		return fmt.Errorf("%w: the bootstrap key is the daemon's token file: replace that file and restart the daemon to change it", ErrInvalid)
	}
	if err := m.st.RevokeKey(ctx, id, m.now()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return fmt.Errorf("keys: revoke %s: %w", id, err)
	}
	m.mu.Lock()
	for h, k := range m.live {
		if k.ID == id {
			delete(m.live, h)
		}
	}
	cancels := m.inflight[id]
	delete(m.inflight, id)
	hooks := m.onRevoke
	m.mu.Unlock()
	for _, c := range cancels {
		c(ErrRevoked)
	}
	for _, f := range hooks {
		f(id)
	}
	m.log.InfoContext(ctx, "API key revoked", "key", id, "cancelled", len(cancels))
	return nil
}

// TenantLimits is tenant's quota: that of its newest live key.
func (m *Manager) TenantLimits(name string) (tenant.Limits, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best store.Key
	found := false
	for _, k := range m.live {
		if k.Tenant != name {
			continue
		}
		if !found || k.CreatedAt.After(best.CreatedAt) || (k.CreatedAt.Equal(best.CreatedAt) && k.ID > best.ID) {
			best, found = k, true
		}
	}
	if !found {
		return tenant.Limits{}, false
	}
	return limitsOf(best.Quota), true
}

// ValidTenant reports whether name may name a tenant.
func ValidTenant(name string) bool { return tenantName.MatchString(name) }

func validate(o CreateOptions) error {
	switch {
	case strings.TrimSpace(o.Name) == "":
		return fmt.Errorf("%w: name is required", ErrInvalid)
	case len(o.Name) > MaxNameLen:
		return fmt.Errorf("%w: name is %d bytes, at most %d", ErrInvalid, len(o.Name), MaxNameLen)
	case strings.IndexFunc(o.Name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: name %q has control characters", ErrInvalid, o.Name)
	case o.Tenant == "":
		return fmt.Errorf("%w: tenant is required", ErrInvalid)
	case !ValidTenant(o.Tenant):
		return fmt.Errorf("%w: tenant %q: want lowercase letters, digits and '-', starting with a letter or digit, at most 63", ErrInvalid, o.Tenant)
	}
	l := o.Limits
	for _, q := range []struct {
		name string
		v    int64
	}{
		{"max_sandboxes", int64(l.MaxSandboxes)}, {"max_vcpus", int64(l.MaxVCPUs)}, {"max_memory_mib", l.MaxMemoryMiB},
		{"max_ttl_secs", l.MaxTTLSecs}, {"max_spawn_n", int64(l.MaxSpawnN)}, {"max_disk_mib", l.MaxDiskMiB},
	} {
		if q.v < 0 || q.v > MaxQuota {
			return fmt.Errorf("%w: %s=%d: want 0 (unlimited) to %d", ErrInvalid, q.name, q.v, MaxQuota)
		}
	}
	return nil
}

func keyOf(k store.Key) Key {
	return Key{ID: k.ID, Name: k.Name, Tenant: k.Tenant, Admin: k.Admin, RevealTokens: k.RevealTokens, Limits: limitsOf(k.Quota),
		CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

func limitsOf(q store.KeyQuota) tenant.Limits {
	return tenant.Limits{MaxSandboxes: q.MaxSandboxes, MaxVCPUs: q.MaxVCPUs, MaxMemoryMiB: q.MaxMemoryMiB,
		MaxTTLSecs: q.MaxTTLSecs, MaxSpawnN: q.MaxSpawnN, MaxDiskMiB: q.MaxDiskMiB}
}

func quotaOf(l tenant.Limits) store.KeyQuota {
	return store.KeyQuota{MaxSandboxes: l.MaxSandboxes, MaxVCPUs: l.MaxVCPUs, MaxMemoryMiB: l.MaxMemoryMiB,
		MaxTTLSecs: l.MaxTTLSecs, MaxSpawnN: l.MaxSpawnN, MaxDiskMiB: l.MaxDiskMiB}
}
