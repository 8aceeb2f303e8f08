package main

import "github.com/cove-sandbox/cove/internal/fakedaemon"

// newSnapFake is an in-memory daemon for the CLI's snapshot, spawn and
// branch commands.
func newSnapFake() *fakedaemon.Daemon { return fakedaemon.New() }
