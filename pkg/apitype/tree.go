package apitype

import "time"

// ContentTypeTar is the media type of a directory's tar stream, as PUT and
// GET /v1/sandboxes/{id}/tar carry it.
const ContentTypeTar = "application/x-tar"

// TarResult is the answer of PUT /v1/sandboxes/{id}/tar: what was written
// under Path. Skipped counts device nodes, FIFOs and sockets, which are
// not made.
type TarResult struct {
	Path     string `json:"path"`
	Files    int64  `json:"files"`
	Dirs     int64  `json:"dirs"`
	Symlinks int64  `json:"symlinks"`
	Links    int64  `json:"links"` // hard links
	Skipped  int64  `json:"skipped"`
	Bytes    int64  `json:"bytes"` // regular files' content
}

// Types of WatchEvent.
const (
	WatchReady    = "ready" // the watch is armed: changes from now on are reported
	WatchCreate   = "create"
	WatchWrite    = "write"
	WatchRemove   = "remove"
	WatchRename   = "rename" // Path was renamed away; a create names where to, when watched
	WatchChmod    = "chmod"
	WatchOverflow = "overflow" // Dropped events were lost here (0: an unknown number)
	WatchEnd      = "end"      // the watched directory itself was removed or moved: the last record
	WatchError    = "error"    // the watch failed: the last record
)

// WatchEvent is one record of GET /v1/sandboxes/{id}/watch (NDJSON, or
// SSE), in the order the changes happened. Path is absolute.
type WatchEvent struct {
	Type    string    `json:"type"`
	Path    string    `json:"path,omitempty"`
	IsDir   bool      `json:"is_dir,omitempty"`
	Time    time.Time `json:"time"`
	Dropped int64     `json:"dropped,omitempty"`
	Error   string    `json:"error,omitempty"`
}
