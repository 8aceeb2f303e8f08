package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/internal/tenant"
)

// Quotas bound the sum over a tenant of what its sandboxes hold, as its
// caller's principal says (tenant.Limits, zero: unlimited). Live
// sandboxes are those that run or are starting, pausing or resuming (a
// paused one holds no CPU or memory: its saved state counts as disk);
// their vCPUs and memory are their limits. Disk is what the tenant's
// snapshots (templates' and their step caches included), checkpoints and
// paused sandboxes take. Checks that count sandboxes run under s.mu with
// the memory budget's reservation, so concurrent creates cannot overshoot.

// quotaError is an ErrQuota whose message names the quota, its value and
// the tenant, and says what to do.
type quotaError struct{ msg string }

func (e *quotaError) Error() string { return e.msg }
func (e *quotaError) Unwrap() error { return ErrQuota }

func quotaErr(quota string, value int64, tenantName, format string, args ...any) error {
	return &quotaError{msg: fmt.Sprintf("quota %s=%d of tenant %s: ", quota, value, tenantName) + fmt.Sprintf(format, args...)}
}

// TenantUse is what a tenant holds now.
type TenantUse struct {
	Sandboxes int
	VCPUs     int
	MemoryMiB int64
	DiskMiB   int64
}

// hold is what creates in progress of one tenant have reserved.
type hold struct {
	sandboxes, vcpus int
	memoryMiB        int64
}

// ask is what one call would add to its tenant's live sandboxes.
type ask struct {
	tenant    string
	limits    tenant.Limits
	n, cpus   int
	memoryMiB int64
	// spawn: the call makes sandboxes (max_spawn_n applies), not a
	// snapshot's builder.
	spawn bool
}

// checkQuotaLocked refuses a if its tenant's live sandboxes plus what it
// asks would pass a quota. s.mu is held.
func (s *Service) checkQuotaLocked(a ask) error {
	l := a.limits
	if l == (tenant.Limits{}) {
		return nil
	}
	if a.spawn && l.MaxSpawnN > 0 && a.n > l.MaxSpawnN {
		return quotaErr("max_spawn_n", int64(l.MaxSpawnN), a.tenant, "this asks for %d sandboxes in one call; ask for at most %d or ask an admin for a larger quota", a.n, l.MaxSpawnN)
	}
	u := s.liveUseLocked(a.tenant)
	switch {
	case l.MaxSandboxes > 0 && u.Sandboxes+a.n > l.MaxSandboxes:
		return quotaErr("max_sandboxes", int64(l.MaxSandboxes), a.tenant, "it holds %d, this asks for %d; kill some or ask an admin for a larger quota", u.Sandboxes, a.n)
	case l.MaxVCPUs > 0 && u.VCPUs+a.n*a.cpus > l.MaxVCPUs:
		return quotaErr("max_vcpus", int64(l.MaxVCPUs), a.tenant, "its sandboxes hold %d, this asks for %d more; kill some, ask for fewer cpus or ask an admin for a larger quota", u.VCPUs, a.n*a.cpus)
	case l.MaxMemoryMiB > 0 && u.MemoryMiB+int64(a.n)*a.memoryMiB > l.MaxMemoryMiB:
		return quotaErr("max_memory_mib", l.MaxMemoryMiB, a.tenant, "its sandboxes hold %d MiB, this asks for %d MiB more; kill some, ask for less memory or ask an admin for a larger quota", u.MemoryMiB, int64(a.n)*a.memoryMiB)
	}
	return nil
}

// reservation is what a create holds while its sandboxes start.
type reservation struct {
	a ask
	// held says a is still held against its tenant's quotas: the commit
	// that lists the sandboxes lets go of it in the same critical section,
	// so they are never counted twice. Guarded by Service.mu.
	held bool
}

// unholdLocked lets go of r's hold on its tenant's quotas, once.
func (s *Service) unholdLocked(r *reservation) {
	if r != nil && r.held {
		r.held = false
		s.holdLocked(r.a, -1)
	}
}

// holdLocked adds (or with sign -1 gives back) a's reservation.
func (s *Service) holdLocked(a ask, sign int) {
	if a.tenant == "" {
		return
	}
	h := s.held[a.tenant]
	h.sandboxes += sign * a.n
	h.vcpus += sign * a.n * a.cpus
	h.memoryMiB += int64(sign*a.n) * a.memoryMiB
	if h == (hold{}) {
		delete(s.held, a.tenant)
		return
	}
	s.held[a.tenant] = h
}

// liveUseLocked sums a tenant's live sandboxes and what its creates in
// progress hold. s.mu is held.
func (s *Service) liveUseLocked(t string) TenantUse {
	h := s.held[t]
	u := TenantUse{Sandboxes: h.sandboxes, VCPUs: h.vcpus, MemoryMiB: h.memoryMiB}
	for _, b := range s.boxes {
		b.mu.Lock()
		r := b.rec
		b.mu.Unlock()
		if r.Tenant != t || r.Status == StatusPaused {
			continue
		}
		u.Sandboxes++
		u.VCPUs += r.CPUs
		u.MemoryMiB += int64(r.MemoryMiB)
	}
	return u
}

// diskUseLocked is the disk, in bytes, that a tenant's snapshots,
// checkpoints and paused sandboxes take. s.mu is held.
func (s *Service) diskUseLocked(t string) int64 {
	var n int64
	for _, sn := range s.snapshots {
		if sn.ready && sn.rec.Tenant == t {
			n += sn.rec.SizeBytes
		}
	}
	for _, b := range s.boxes {
		b.mu.Lock()
		if b.rec.Tenant == t {
			n += b.rec.PausedBytes
			for _, c := range b.ckpts {
				n += c.SizeBytes
			}
		}
		b.mu.Unlock()
	}
	return n
}

const mib = 1 << 20

// TenantUse sums what tenantName holds now, for GET /v1/usage. ctx's
// caller must be able to see that tenant's things (else it holds nothing
// the caller may know of).
func (s *Service) TenantUse(ctx context.Context, tenantName string) TenantUse {
	if !tenant.CanSee(ctx, tenantName) {
		return TenantUse{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.liveUseLocked(tenantName)
	u.DiskMiB = (s.diskUseLocked(tenantName) + mib - 1) / mib
	return u
}

// checkDiskQuota refuses a save (snapshot, branch, checkpoint, pause,
// template step) for tenant t once what it keeps on disk has reached
// ctx's max_disk_mib: a save's size is known only once it is written.
func (s *Service) checkDiskQuota(ctx context.Context, t, what string) error {
	max := tenant.LimitsOf(ctx).MaxDiskMiB
	if max <= 0 {
		return nil
	}
	s.mu.Lock()
	used := s.diskUseLocked(t)
	s.mu.Unlock()
	if used >= max*mib {
		return quotaErr("max_disk_mib", max, t, "its snapshots, templates, checkpoints and paused sandboxes take %d MiB, so %s cannot be saved; delete some or ask an admin for a larger quota", (used+mib-1)/mib, what)
	}
	return nil
}

// checkTTLQuota refuses a lifetime past ctx's max_ttl_secs.
func checkTTLQuota(ctx context.Context, ttl time.Duration) error {
	if max := tenant.LimitsOf(ctx).MaxTTLSecs; max > 0 && ttl > time.Duration(max)*time.Second {
		return quotaErr("max_ttl_secs", max, tenant.Of(ctx), "this asks for ttl_secs %d; ask for at most %d or ask an admin for a larger quota", inSecs(ttl), max)
	}
	return nil
}

// quotaTTL is the lifetime a call that gave none gets: the default, cut
// to ctx's max_ttl_secs.
func quotaTTL(ctx context.Context, def time.Duration) time.Duration {
	if max := tenant.LimitsOf(ctx).MaxTTLSecs; max > 0 && def > time.Duration(max)*time.Second {
		return time.Duration(max) * time.Second
	}
	return def
}
