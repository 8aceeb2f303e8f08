package apitype

// MkdirRequest is the body of POST /v1/sandboxes/{id}/mkdir: the directory
// and its missing parents are made; one that exists already is fine.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"` // octal permission bits, e.g. "0700"; default "0755"
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/move. An existing
// target is a 409 unless Overwrite.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}
