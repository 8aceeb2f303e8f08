package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/yamux"
)

// OpWatch watches a directory: after the Response, one JSON record per
// event until the watch ends (End frame) or the host closes the stream.
const OpWatch = "watch"

// Types of WatchEvent.
const (
	WatchReady    = "ready" // the watch is armed: later changes are reported
	WatchCreate   = "create"
	WatchWrite    = "write"
	WatchRemove   = "remove"
	WatchRename   = "rename" // Path was renamed away; a create names where to, if watched
	WatchChmod    = "chmod"
	WatchOverflow = "overflow" // Dropped events were lost; 0: an unknown number
	WatchEnd      = "end"      // the watched directory is gone: the last record
)

// MaxWatchQueue bounds the events a watch holds for a slow reader; more
// are dropped and counted in an overflow record.
const MaxWatchQueue = 4096

// WatchRequest watches the directory Path, and with Recursive every
// directory below it, including ones made or moved in later.
type WatchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// WatchEvent is one record of a watch, in the order the agent saw them.
type WatchEvent struct {
	Type         string `json:"type"`
	Path         string `json:"path,omitempty"` // absolute
	IsDir        bool   `json:"is_dir,omitempty"`
	TimeUnixNano int64  `json:"time_unix_nano"`
	Dropped      int64  `json:"dropped,omitempty"`
}

// WatchHandler carries out watches on the guest side.
type WatchHandler interface {
	// Watch calls ready once the watch is armed, then emit for each event,
	// until ctx is done or the directory is gone. An error before ready is
	// the call's answer.
	Watch(ctx context.Context, req WatchRequest, ready func() error, emit func(WatchEvent) error) error
}

// serveWatch serves OpWatch.
func serveWatch(h WatchHandler) StreamServer {
	return func(ctx context.Context, st *yamux.Stream, op string, decode func(any) error) bool {
		if op != OpWatch {
			return false
		}
		var req WatchRequest
		if err := decode(&req); err != nil {
			writeResponse(st, nil, err)
			return true
		}
		ctx, cancel := cancelOnHostClose(ctx, st)
		defer cancel()
		answered := false
		ready := func() error {
			answered = true
			return writeResponse(st, struct{}{}, nil)
		}
		err := h.Watch(ctx, req, ready, func(ev WatchEvent) error { return WriteJSON(st, ev) })
		switch {
		case !answered:
			writeResponse(st, nil, err)
		case err == nil:
			WriteEnd(st)
		}
		return true
	}
}

// Watch is a watch in progress on the host side.
type Watch struct {
	s *Stream
}

// Watch starts a watch. The caller reads its events with Next and must
// Close it.
func (c *Client) Watch(ctx context.Context, req WatchRequest) (*Watch, error) {
	s, err := c.OpenStream(ctx, OpWatch, req, nil)
	if err != nil {
		return nil, err
	}
	return &Watch{s: s}, nil
}

// Next returns the next event; io.EOF once the watch has ended.
func (w *Watch) Next() (WatchEvent, error) {
	var ev WatchEvent
	rec, err := w.s.Next()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return ev, fmt.Errorf("agentproto: the watch was cut short: %w", err)
		}
		return ev, err
	}
	if rec.Kind == RecordEnd {
		return ev, io.EOF
	}
	return ev, rec.Decode(&ev)
}

// Close ends the watch.
func (w *Watch) Close() error { return w.s.Close() }
