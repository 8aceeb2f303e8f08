package envd

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/internal/e2b/pb/filesystem"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// maxWatcherEvents bounds what a polling watcher holds between polls; past
// it the oldest are dropped.
const maxWatcherEvents = 4096

// A watcher nobody polls is dropped after watcherIdle (its sandbox gone, or
// a client that never removes it), one whose watch has ended after
// endedIdle, so abandoned watchers do not fill the table.
const (
	watcherIdle = 10 * time.Minute
	endedIdle   = time.Minute
)

// watcherTable holds the polling watchers (CreateWatcher): each a cove
// watch the facade keeps open, its events queued until the next poll.
type watcherTable struct {
	mu   sync.Mutex
	max  int
	byID map[string]*watcher
}

type watcher struct {
	sb     string
	token  [32]byte // SHA-256 of the sandbox token that made it
	cancel context.CancelFunc

	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
	err    error     // why the watch ended, once it has
	polled time.Time // made, or last polled
}

func newWatcherTable(max int) *watcherTable {
	return &watcherTable{max: max, byID: map[string]*watcher{}}
}

// start opens a watch that outlives the request (until RemoveWatcher or
// base ends) and returns once it is armed.
func (wt *watcherTable) start(ctx, base context.Context, t target, root string, recursive, entries bool) (string, error) {
	wt.mu.Lock()
	wt.sweepLocked(time.Now())
	full, mine := len(wt.byID) >= wt.max, 0
	for _, w := range wt.byID {
		if w.sb == t.id {
			mine++
		}
	}
	wt.mu.Unlock()
	// One sandbox may hold a share of the table, so it cannot starve the
	// others.
	if full || mine >= max(wt.max/4, 1) {
		return "", connect.NewError(connect.CodeResourceExhausted, errors.New("too many watchers: remove some"))
	}
	wctx, cancel := context.WithCancel(base)
	w := &watcher{sb: t.id, token: sha256.Sum256([]byte(t.token)), cancel: cancel, polled: time.Now()}
	ready := make(chan error, 1)
	go func() {
		armed := false
		err := t.c.Watch(wctx, t.id, t.token, root, recursive, func(ev apitype.WatchEvent) error {
			if ev.Type == apitype.WatchReady {
				armed = true
				ready <- nil
				return nil
			}
			fe, ok := fsEvent(root, ev)
			if !ok {
				return nil
			}
			if entries {
				withEntry(wctx, t, root, ev, fe)
			}
			w.mu.Lock()
			if len(w.events) == maxWatcherEvents {
				w.events = w.events[1:]
			}
			w.events = append(w.events, fe)
			w.mu.Unlock()
			return nil
		})
		if err == nil || errors.Is(err, client.ErrWatchEnded) {
			err = errors.New("the watch has ended")
		}
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		if !armed {
			ready <- err
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			return "", toConnect(err)
		}
	case <-ctx.Done():
		cancel()
		return "", toConnect(ctx.Err())
	}
	id := randhex.New(16)
	wt.mu.Lock()
	wt.byID[id] = w
	wt.mu.Unlock()
	return id, nil
}

// get returns the watcher if t's sandbox and token made it.
func (wt *watcherTable) get(t target, id string) (*watcher, error) {
	wt.mu.Lock()
	w := wt.byID[id]
	wt.mu.Unlock()
	sum := sha256.Sum256([]byte(t.token))
	if w == nil || w.sb != t.id || subtle.ConstantTimeCompare(sum[:], w.token[:]) != 1 {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no watcher "+id))
	}
	return w, nil
}

// take returns the events queued since the last poll; a watch that has
// ended answers its error once its events are taken.
func (wt *watcherTable) take(t target, id string) ([]*filesystem.FilesystemEvent, error) {
	w, err := wt.get(t, id)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polled = time.Now()
	evs := w.events
	w.events = nil
	if len(evs) == 0 && w.err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, w.err)
	}
	return evs, nil
}

func (wt *watcherTable) remove(t target, id string) error {
	w, err := wt.get(t, id)
	if err != nil {
		return err
	}
	w.cancel()
	wt.mu.Lock()
	delete(wt.byID, id)
	wt.mu.Unlock()
	return nil
}

func (wt *watcherTable) closeAll() {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	for id, w := range wt.byID {
		w.cancel()
		delete(wt.byID, id)
	}
}

// sweepLocked drops the watchers left unpolled too long.
func (wt *watcherTable) sweepLocked(now time.Time) {
	for id, w := range wt.byID {
		w.mu.Lock()
		idle, ended := now.Sub(w.polled), w.err != nil
		w.mu.Unlock()
		if idle > watcherIdle || (ended && idle > endedIdle) {
			w.cancel()
			delete(wt.byID, id)
		}
	}
}
