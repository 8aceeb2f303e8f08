package sandbox

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Types of WatchEvent.
const (
	WatchReady    = agentproto.WatchReady
	WatchCreate   = agentproto.WatchCreate
	WatchWrite    = agentproto.WatchWrite
	WatchRemove   = agentproto.WatchRemove
	WatchRename   = agentproto.WatchRename
	WatchChmod    = agentproto.WatchChmod
	WatchOverflow = agentproto.WatchOverflow
	WatchEnd      = agentproto.WatchEnd
)

// WatchRequest watches the directory Path, and with Recursive every
// directory below it, including ones made or moved in later.
type WatchRequest struct {
	Path      string
	Recursive bool
}

// WatchEvent is one change in a watched tree, or a watch's own record:
// ready first, overflow where events were dropped (Dropped of them; 0 if
// unknown), end when the directory itself went away.
type WatchEvent struct {
	Type    string
	Path    string
	IsDir   bool
	Time    time.Time
	Dropped int64
}

// Watcher is a watch in progress. Watches are per connection: a branch's
// child has none of its source's.
type Watcher struct {
	sb *Sandbox
	w  *agentproto.Watch
}

// Watch starts watching a directory: a path that does not exist is
// ErrNotFound, one that is not a directory ErrInvalid. The caller reads
// events with Next and must Close the watcher.
func (sb *Sandbox) Watch(ctx context.Context, req WatchRequest) (*Watcher, error) {
	if _, err := agentproto.ResolvePath(req.Path); err != nil {
		return nil, mapErr(err)
	}
	a, err := sb.agent(ctx)
	if err != nil {
		return nil, err
	}
	w, err := a.Watch(ctx, agentproto.WatchRequest{Path: req.Path, Recursive: req.Recursive})
	if err != nil {
		return nil, sb.fail(err)
	}
	return &Watcher{sb: sb, w: w}, nil
}

// Next returns the next event, io.EOF after the last.
func (w *Watcher) Next() (WatchEvent, error) {
	ev, err := w.w.Next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return WatchEvent{}, io.EOF
		}
		return WatchEvent{}, w.sb.fail(err)
	}
	return WatchEvent{Type: ev.Type, Path: ev.Path, IsDir: ev.IsDir, Time: time.Unix(0, ev.TimeUnixNano), Dropped: ev.Dropped}, nil
}

// Close ends the watch.
func (w *Watcher) Close() error { return w.w.Close() }
