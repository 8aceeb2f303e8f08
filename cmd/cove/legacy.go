package main

// Names bench.go still calls. Their homes are internal/fsutil and
// go-humanize; these go when the bench moves to internal/bench.

import (
	"io/fs"

	"github.com/dustin/go-humanize"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// writeFileAtomic is fsutil.WriteFile.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return fsutil.WriteFile(path, data, perm)
}

// fmtBytes is humanize.IBytes, for a signed count.
func fmtBytes(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }
