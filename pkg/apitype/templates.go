package apitype

// POST /v1/templates builds a template from a Dockerfile. The query gives
// the options (name, dockerfile: its path in the context, default
// "Dockerfile"; build_arg=K=V, repeated; start, ready; cpus, memory_mib,
// disk_mib; pool_size, default the daemon's; network: a NetworkPolicy as
// JSON) and the body is the build
// context as a tar stream. The answer streams NDJSON, one
// TemplateBuildEvent a line, ending with the template or the error that
// ended the build.

// TemplateBuildEvent is one line of a template build's answer: a step
// starting, output of a RUN, then the result or the error.
type TemplateBuildEvent struct {
	Step     *TemplateStepEvent `json:"step,omitempty"`
	Output   string             `json:"output,omitempty"`
	Template *TemplateInfo      `json:"template,omitempty"`
	Error    *ErrorBody         `json:"error,omitempty"`
}

// TemplateStepEvent is a step starting: N of Total, its Dockerfile line
// (0 for the start command), its text, and whether its cache is used.
type TemplateStepEvent struct {
	N      int    `json:"n"`
	Total  int    `json:"total"`
	Line   int    `json:"line,omitempty"`
	Text   string `json:"text"`
	Cached bool   `json:"cached"`
}

// TemplateStep is one step of a built template.
type TemplateStep struct {
	Line int    `json:"line,omitempty"`
	Text string `json:"text"`
	// Cache is the hidden snapshot its result is kept in, if it keeps one.
	Cache string `json:"cache,omitempty"`
}

// TemplateInfo describes a template: a snapshot of the same name (spawn
// from it with snapshot_tag) and its step caches.
type TemplateInfo struct {
	Name          string         `json:"name"`
	Base          string         `json:"base"`  // the FROM reference
	Image         string         `json:"image"` // the image id it resolved to
	Digest        string         `json:"dockerfile_digest"`
	Steps         []TemplateStep `json:"steps"`
	BuildMs       int64          `json:"build_ms"`
	CreatedAtUnix int64          `json:"created_at_unix"`
	// SizeBytes counts its snapshot and its step caches.
	SizeBytes int64 `json:"size_bytes"`
	// Cached is set on a build's answer when every step was cached and
	// nothing changed.
	Cached   bool          `json:"cached,omitempty"`
	Snapshot *SnapshotInfo `json:"snapshot,omitempty"`
}
