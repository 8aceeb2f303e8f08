//go:build race

package api

// raceDetector: the race detector slows encoding/json some twentyfold, so
// tests that move tens of MiB of JSON leave that to the e2e suite.
const raceDetector = true
