package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Watch reports the changes in a directory through inotify, and with
// req.Recursive in every directory below it: ones made or moved in later
// are watched as they appear, and what they already hold is reported as
// created. The watch ends with an end record when the directory itself is
// removed or moved away.
func (a *Agent) Watch(ctx context.Context, req agentproto.WatchRequest, ready func() error, emit func(agentproto.WatchEvent) error) error {
	p, err := a.resolve(req.Path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fsError(err)
	}
	if !fi.IsDir() {
		return agentproto.Errorf(agentproto.CodeInvalid, "%s is not a directory: watch the directory it is in", p)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fsError(err)
	}
	w := &watcher{fw: fw, root: p, recursive: req.Recursive, dirs: map[string]bool{},
		q: newEventQueue(agentproto.MaxWatchQueue)}
	if err := w.add(p, false); err != nil {
		fw.Close()
		return err
	}
	loopDone := make(chan struct{})
	defer func() {
		fw.Close() // ends the loop
		<-loopDone
	}()
	if err := ready(); err != nil {
		close(loopDone)
		return nil
	}
	go func() {
		defer close(loopDone)
		w.loop(ctx)
	}()
	if err := emit(agentproto.WatchEvent{Type: agentproto.WatchReady, Path: p, IsDir: true, TimeUnixNano: time.Now().UnixNano()}); err != nil {
		return nil
	}
	return w.drain(ctx, emit)
}

// watcher is one watch: the loop goroutine owns dirs and fw's watches,
// and hands events to the caller's goroutine through q.
type watcher struct {
	fw        *fsnotify.Watcher
	root      string
	recursive bool
	dirs      map[string]bool // the directories watched
	q         *eventQueue
}

// add watches dir, and with recursive the directories below it. With
// report, what is below dir is reported as created: it got there before
// its directory was watched.
func (w *watcher) add(dir string, report bool) error {
	if !w.recursive {
		w.dirs[dir] = true
		return w.addErr(dir, w.fw.Add(dir))
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone or unreadable since: nothing to watch there
		}
		if report && p != dir {
			w.q.push(agentproto.WatchEvent{Type: agentproto.WatchCreate, Path: p, IsDir: d.IsDir(), TimeUnixNano: time.Now().UnixNano()})
		}
		if !d.IsDir() {
			return nil
		}
		if err := w.fw.Add(p); err != nil {
			if report {
				return nil // went away meanwhile, or past the limit: skip it
			}
			return w.addErr(p, err)
		}
		w.dirs[p] = true
		return nil
	})
}

func (w *watcher) addErr(dir string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return agentproto.Errorf(agentproto.CodeTooLarge, "watch %s: the sandbox's limit of inotify watches is reached (fs.inotify.max_user_watches): watch a smaller tree", dir)
	}
	return fsError(err)
}

// forget stops watching dir and what is below it, once moved or removed.
func (w *watcher) forget(dir string) {
	for d := range w.dirs {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			w.fw.Remove(d)
			delete(w.dirs, d)
		}
	}
}

// loop turns inotify's events into records until ctx is done, the watcher
// is closed or the watched directory is gone.
func (w *watcher) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.q.push(agentproto.WatchEvent{Type: agentproto.WatchOverflow, TimeUnixNano: time.Now().UnixNano()})
			}
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if w.handle(ev) {
				return
			}
		}
	}
}

// ops are the records an inotify event becomes, in the order reported.
var watchOps = []struct {
	op  fsnotify.Op
	typ string
}{
	{fsnotify.Create, agentproto.WatchCreate},
	{fsnotify.Write, agentproto.WatchWrite},
	{fsnotify.Chmod, agentproto.WatchChmod},
	{fsnotify.Rename, agentproto.WatchRename},
	{fsnotify.Remove, agentproto.WatchRemove},
}

// handle queues the records of ev; it reports true once the watched
// directory is gone.
func (w *watcher) handle(ev fsnotify.Event) (ended bool) {
	now := time.Now().UnixNano()
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	isDir := w.dirs[ev.Name]
	if !gone && !isDir {
		if fi, err := os.Lstat(ev.Name); err == nil {
			isDir = fi.IsDir()
		}
	}
	for _, o := range watchOps {
		if ev.Has(o.op) {
			w.q.push(agentproto.WatchEvent{Type: o.typ, Path: ev.Name, IsDir: isDir, TimeUnixNano: now})
		}
	}
	switch {
	case ev.Name == w.root && gone:
		w.q.push(agentproto.WatchEvent{Type: agentproto.WatchEnd, Path: w.root, IsDir: true, TimeUnixNano: now})
		return true
	case gone && isDir:
		w.forget(ev.Name)
	case ev.Has(fsnotify.Create) && isDir && w.recursive:
		w.add(ev.Name, true)
	}
	return false
}

// drain sends the queued records as they come until the watch ends or the
// host goes.
func (w *watcher) drain(ctx context.Context, emit func(agentproto.WatchEvent) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.q.wake:
		}
		for _, ev := range w.q.take() {
			if err := emit(ev); err != nil {
				return nil // the host is gone
			}
			if ev.Type == agentproto.WatchEnd {
				return nil
			}
		}
	}
}

// eventQueue holds a watch's records for a slow reader, at most max of
// them; past that they are counted in one overflow record, in place.
type eventQueue struct {
	mu   sync.Mutex
	evs  []agentproto.WatchEvent
	max  int
	wake chan struct{}
}

func newEventQueue(max int) *eventQueue {
	return &eventQueue{max: max, wake: make(chan struct{}, 1)}
}

func (q *eventQueue) push(ev agentproto.WatchEvent) {
	q.mu.Lock()
	n := len(q.evs)
	switch {
	case n > 0 && q.evs[n-1].Type == agentproto.WatchOverflow && (ev.Type == agentproto.WatchOverflow || n > q.max):
		q.evs[n-1].Dropped += dropped(ev)
	case n >= q.max && ev.Type != agentproto.WatchEnd:
		q.evs = append(q.evs, agentproto.WatchEvent{Type: agentproto.WatchOverflow, TimeUnixNano: ev.TimeUnixNano, Dropped: dropped(ev)})
	default:
		q.evs = append(q.evs, ev)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// dropped is how many events ev stands for once dropped: an overflow of
// the kernel's queue counts none, its number being unknown.
func dropped(ev agentproto.WatchEvent) int64 {
	if ev.Type == agentproto.WatchOverflow {
		return ev.Dropped
	}
	return 1
}

func (q *eventQueue) take() []agentproto.WatchEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.evs
	q.evs = nil
	return evs
}
