package apitype

// Statuses of a sandbox being paused, paused (its state on disk, no
// memory or processes held) and being resumed or rolled back.
const (
	StatusPausing  = "pausing"
	StatusPaused   = "paused"
	StatusResuming = "resuming"
)

// What a sandbox does when its lifetime ends (CreateSandboxRequest.OnExpiry).
const (
	OnExpiryKill  = "kill"  // destroyed, with everything in it (the default)
	OnExpiryPause = "pause" // paused, to be resumed (with a new lifetime) or deleted
)

// ResumeRequest is the optional body of POST /v1/sandboxes/{id}/resume.
type ResumeRequest struct {
	// TTLSecs, if set, is its lifetime from now on; else what was left of
	// it at the pause (a sandbox paused at its expiry gets the daemon's
	// default lifetime).
	TTLSecs int64 `json:"ttl_secs,omitempty"`
}

// CheckpointRequest is the body of POST /v1/sandboxes/{id}/checkpoints.
type CheckpointRequest struct {
	// Name is unique within the sandbox: 1-64 letters, digits, '.', '_'
	// or '-', starting with a letter or digit. "": one is made up.
	Name string `json:"name,omitempty"`
}

// CheckpointInfo describes a sandbox's checkpoint.
type CheckpointInfo struct {
	Name          string `json:"name"`
	SizeBytes     int64  `json:"size_bytes"`
	CreatedAtUnix int64  `json:"created_at_unix"`
	// PauseMs is how long taking it stood the sandbox still (set in the
	// answer to the POST only).
	PauseMs int64 `json:"pause_ms,omitempty"`
}

// CheckpointsResponse answers GET /v1/sandboxes/{id}/checkpoints.
type CheckpointsResponse struct {
	Checkpoints []CheckpointInfo `json:"checkpoints"`
}

// RollbackRequest is the body of POST /v1/sandboxes/{id}/rollback.
type RollbackRequest struct {
	Checkpoint string `json:"checkpoint"`
}
