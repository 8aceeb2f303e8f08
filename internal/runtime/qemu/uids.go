package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// UIDRange is a range of host uids, one per VM: [Base, Base+Count).
type UIDRange struct{ Base, Count int }

// ParseUIDRange reads "BASE:COUNT" (cove serve --qemu-uids).
func ParseUIDRange(s string) (UIDRange, error) {
	b, c, ok := strings.Cut(s, ":")
	base, err1 := strconv.Atoi(b)
	count, err2 := strconv.Atoi(c)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("uid range %q: want BASE:COUNT", s)
	}
	r := UIDRange{Base: base, Count: count}
	return r, r.check()
}

// String is the range as --qemu-uids takes it.
func (u UIDRange) String() string { return strconv.Itoa(u.Base) + ":" + strconv.Itoa(u.Count) }

// check refuses ranges that include root or system users, or wrap.
func (u UIDRange) check() error {
	switch {
	case u.Count <= 0:
		return fmt.Errorf("uid range %d:%d: the count must be positive", u.Base, u.Count)
	case u.Base < 1000:
		return fmt.Errorf("uid range %d:%d: below 1000 are the system's users", u.Base, u.Count)
	case int64(u.Base)+int64(u.Count) > 1<<31-2:
		return fmt.Errorf("uid range %d:%d: past the largest uid", u.Base, u.Count)
	}
	return nil
}

// DefaultUIDs is the range cove serve gives VMs unless told otherwise: the
// start of what systemd leaves unused (0x70000000 on), above its container
// ranges and every /etc/subuid range handed to people.
var DefaultUIDs = UIDRange{Base: 0x70000000, Count: 65536}

// ErrUIDsUnsupported is a range asked of a runtime that cannot give every
// VM its own uid.
var ErrUIDsUnsupported = errors.New("qemu: one uid per VM needs an unprivileged --qemu-user (its group reads snapshots) and a QEMU with memory-backend-file rom= (8.2 or later)")

// ErrNoUID is a VM that finds every uid of the range taken.
var ErrNoUID = errors.New("qemu: every uid of --qemu-uids is in use")

// uidPool hands each VM a uid of its own from a range: taken when its
// launch begins, given back when its directory is gone (Destroy), and
// found again after a restart from the owner of each VM's directory, which
// is the first thing a launch gives its uid.
type uidPool struct {
	rng  UIDRange
	mu   sync.Mutex
	byID map[string]int
	used map[int]string
}

func newUIDPool(rng UIDRange) *uidPool {
	return &uidPool{rng: rng, byID: map[string]int{}, used: map[int]string{}}
}

// get returns id's uid, taking a free one if it has none.
func (p *uidPool) get(id string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if uid, ok := p.byID[id]; ok {
		return uid, nil
	}
	for uid := p.rng.Base; uid < p.rng.Base+p.rng.Count; uid++ {
		if _, taken := p.used[uid]; !taken {
			p.byID[id], p.used[uid] = uid, id
			return uid, nil
		}
	}
	return 0, fmt.Errorf("%w (%d)", ErrNoUID, p.rng.Count)
}

// lookup returns id's uid, if it has one.
func (p *uidPool) lookup(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.byID[id]
	return uid, ok
}

// put gives id's uid back.
func (p *uidPool) put(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if uid, ok := p.byID[id]; ok {
		delete(p.byID, id)
		delete(p.used, uid)
	}
}

// recover takes, for every VM directory in dir, the uid that owns it when
// it is in the range: the VMs an earlier daemon left.
func (p *uidPool) recover(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range ents {
		if !e.IsDir() || !runtime.ValidID(e.Name()) {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			continue
		}
		uid := int(st.Uid)
		if uid >= p.rng.Base && uid < p.rng.Base+p.rng.Count {
			if other, taken := p.used[uid]; taken {
				return fmt.Errorf("uid %d owns both %s and %s", uid, other, e.Name())
			}
			p.byID[e.Name()], p.used[uid] = uid, e.Name()
		}
	}
	return nil
}
