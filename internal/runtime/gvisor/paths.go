package gvisor

import "path/filepath"

// RootDir is runsc's --root for a runtime whose Config.Dir is dir. Tools
// on the daemon's host that run runsc against its sandboxes (cove bench's
// runsc exec baseline) find them there.
func RootDir(dir string) string { return filepath.Join(dir, ".runsc") }
