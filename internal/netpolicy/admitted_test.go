package netpolicy

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

func TestAdmitted(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	s := newAdmitted(3)
	s.admit(a, "x.test", now.Add(time.Minute), now)
	if !s.has(a, now) || !s.has(a, now.Add(59*time.Second)) {
		t.Error("admitted address not there within its time")
	}
	if s.has(a, now.Add(time.Minute)) || s.has(b, now) {
		t.Error("address there past its time, or never admitted")
	}
	// A later answer extends; an earlier one does not shorten.
	s.admit(a, "x.test", now.Add(2*time.Minute), now)
	s.admit(a, "x.test", now.Add(time.Second), now)
	if !s.has(a, now.Add(90*time.Second)) || s.len() != 1 {
		t.Errorf("extension lost (len %d)", s.len())
	}
	// Two names for one address: forgetting one keeps the other.
	s.admit(a, "y.test", now.Add(time.Minute), now)
	s.retain(func(name string) bool { return name != "x.test" })
	if !s.has(a, now) || s.has(a, now.Add(90*time.Second)) || s.len() != 1 {
		t.Errorf("retain: len %d", s.len())
	}
	s.retain(func(string) bool { return false })
	if s.has(a, now) || s.len() != 0 {
		t.Error("retain of nothing kept something")
	}
}

func TestAdmittedBound(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newAdmitted(10)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}) }
	for i := range 10 {
		s.admit(addr(i), "n.test", now.Add(time.Duration(i+1)*time.Minute), now)
	}
	// Full: the next admission drops the soonest to expire.
	s.admit(addr(100), "n.test", now.Add(time.Hour), now)
	if s.len() != 10 || s.has(addr(0), now) || !s.has(addr(1), now) || !s.has(addr(100), now) {
		t.Errorf("eviction: len %d", s.len())
	}
	// Expired pairs go first, all of them.
	later := now.Add(5*time.Minute + time.Second)
	s.admit(addr(101), "n.test", later.Add(time.Hour), later)
	if s.len() != 7 || s.has(addr(4), later) || !s.has(addr(5), later) {
		t.Errorf("expiry: len %d", s.len())
	}
	for i := range 1000 {
		s.admit(addr(i%250), fmt.Sprint("m", i, ".test"), later.Add(time.Hour), later)
	}
	if s.len() != 10 {
		t.Errorf("len %d past the bound", s.len())
	}
}
