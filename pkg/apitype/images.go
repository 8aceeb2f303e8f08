package apitype

// ImageInfo describes a guest image in the daemon's image store: built
// (cove image build) or imported from OCI (POST /v1/images).
type ImageInfo struct {
	ID            string       `json:"id"` // <name>-<key12>
	Name          string       `json:"name"`
	Current       bool         `json:"current"` // what new sandboxes of Name get
	CreatedAtUnix int64        `json:"created_at_unix"`
	SizeBytes     int64        `json:"size_bytes"`
	VM            bool         `json:"vm"`               // has the QEMU backend's artifacts
	Source        string       `json:"source,omitempty"` // of an imported image: "ref REF" or "archive NAME sha256:..."
	Digest        string       `json:"digest,omitempty"` // its OCI manifest digest
	Config        *ImageConfig `json:"config,omitempty"` // its OCI config's run settings
}

// ImageConfig is what an imported image's OCI config says about running
// it.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// ImageImportEvent is one line of a streamed POST /v1/images: a line of
// progress, then the image or the error that ended the import.
type ImageImportEvent struct {
	Output string     `json:"output,omitempty"`
	Image  *ImageInfo `json:"image,omitempty"`
	Error  *ErrorBody `json:"error,omitempty"`
}

// DeleteImageResponse lists the image ids DELETE /v1/images/{name} removed.
type DeleteImageResponse struct {
	Removed []string `json:"removed"`
}
