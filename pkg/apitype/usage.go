package apitype

import "time"

// UsageFigures are metered use over a range. Seconds count while a sandbox
// runs (not while paused or dead); vCPU- and GiB-seconds weigh them by its
// vCPUs and memory limit. Bytes are its network link's, seen from the
// sandbox (in: received). Execs count exec calls, background process
// starts and terminals.
type UsageFigures struct {
	SandboxSeconds float64 `json:"sandbox_seconds"`
	VCPUSeconds    float64 `json:"vcpu_seconds"`
	GiBSeconds     float64 `json:"gib_seconds"`
	BytesIn        int64   `json:"bytes_in"`
	BytesOut       int64   `json:"bytes_out"`
	Execs          int64   `json:"execs"`
}

// TemplateUsage is the use of the sandboxes that came from one template:
// a snapshot's or template's tag, or the image id of a cold create.
type TemplateUsage struct {
	Template string `json:"template"`
	UsageFigures
}

// SandboxUsage is one sandbox's use; Running says it runs now.
type SandboxUsage struct {
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	Running   bool   `json:"running"`
	UsageFigures
}

// UsageQuota is a tenant's quota; an absent (zero) field is unlimited.
type UsageQuota struct {
	MaxSandboxes int   `json:"max_sandboxes,omitempty"`
	MaxVCPUs     int   `json:"max_vcpus,omitempty"`
	MaxMemoryMiB int64 `json:"max_memory_mib,omitempty"`
	MaxTTLSecs   int64 `json:"max_ttl_secs,omitempty"`
	MaxSpawnN    int   `json:"max_spawn_n,omitempty"`
	MaxDiskMiB   int64 `json:"max_disk_mib,omitempty"`
}

// UsageInUse is what a tenant holds now: its running sandboxes, their
// vCPUs and memory limits, and (when the daemon knows it) the disk its
// snapshots, templates and paused sandboxes take.
type UsageInUse struct {
	Sandboxes int    `json:"sandboxes"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
	DiskMiB   *int64 `json:"disk_mib,omitempty"`
}

// UsageRemaining is what the quota leaves; an absent field is unlimited
// (or, for disk, not known).
type UsageRemaining struct {
	Sandboxes *int   `json:"sandboxes,omitempty"`
	VCPUs     *int   `json:"vcpus,omitempty"`
	MemoryMiB *int64 `json:"memory_mib,omitempty"`
	DiskMiB   *int64 `json:"disk_mib,omitempty"`
}

// Usage answers GET /v1/usage: a tenant's metered use in [from, to), in
// total, by template and by sandbox (intervals clipped to the range), with
// its quota, what it holds now and what is left.
type Usage struct {
	Tenant     string          `json:"tenant"`
	From       time.Time       `json:"from"`
	To         time.Time       `json:"to"`
	Totals     UsageFigures    `json:"totals"`
	ByTemplate []TemplateUsage `json:"by_template"`
	BySandbox  []SandboxUsage  `json:"by_sandbox"`
	Quota      UsageQuota      `json:"quota"`
	InUse      UsageInUse      `json:"in_use"`
	Remaining  UsageRemaining  `json:"remaining"`
}
