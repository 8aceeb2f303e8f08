package netpolicy

import (
	"net/netip"
	"sync"
	"time"
)

// admitted is a sandbox's addresses that its resolver answered for allowed
// names, each until its TTL and a grace have passed. It keeps the name too,
// so a policy update can drop what the new policy no longer allows.
type admitted struct {
	max int // bound on (address, name) pairs

	mu     sync.Mutex
	n      int
	byAddr map[netip.Addr]map[string]time.Time
}

func newAdmitted(max int) *admitted {
	return &admitted{max: max, byAddr: map[netip.Addr]map[string]time.Time{}}
}

// admit records that name resolved to a until then. A full set first drops
// what has expired, then the pairs that expire soonest: a sandbox that
// resolves more names than the bound loses only its own oldest answers.
func (s *admitted) admit(a netip.Addr, name string, until, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.byAddr[a]
	if t, ok := names[name]; ok {
		if until.After(t) {
			names[name] = until
		}
		return
	}
	if s.n >= s.max {
		s.expire(now)
	}
	for s.n >= s.max && s.n > 0 {
		s.evictSoonest()
	}
	if names == nil {
		names = map[string]time.Time{}
		s.byAddr[a] = names
	}
	names[name] = until
	s.n++
}

// has reports whether a was admitted for some name that has not expired.
func (s *admitted) has(a netip.Addr, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.byAddr[a] {
		if now.Before(t) {
			return true
		}
	}
	return false
}

// retain drops the pairs whose name keep rejects.
func (s *admitted) retain(keep func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(func(name string, _ time.Time) bool { return !keep(name) })
}

func (s *admitted) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// expire drops what has expired; s.mu is held.
func (s *admitted) expire(now time.Time) {
	s.drop(func(_ string, t time.Time) bool { return !now.Before(t) })
}

// evictSoonest drops the one pair that expires first; s.mu is held.
func (s *admitted) evictSoonest() {
	var first time.Time
	var addr netip.Addr
	var name string
	for a, names := range s.byAddr {
		for n, t := range names {
			if first.IsZero() || t.Before(first) {
				first, addr, name = t, a, n
			}
		}
	}
	if first.IsZero() {
		return
	}
	delete(s.byAddr[addr], name)
	if len(s.byAddr[addr]) == 0 {
		delete(s.byAddr, addr)
	}
	s.n--
}

// drop removes the pairs gone selects; s.mu is held.
func (s *admitted) drop(gone func(name string, until time.Time) bool) {
	for a, names := range s.byAddr {
		for name, t := range names {
			if gone(name, t) {
				delete(names, name)
				s.n--
			}
		}
		if len(names) == 0 {
			delete(s.byAddr, a)
		}
	}
}
