package agentproto

import "context"

// Ops of the file system calls beside put, get and list.
const (
	OpStat   = "stat"
	OpMkdir  = "mkdir"
	OpMove   = "move"
	OpRemove = "remove"
)

// Error codes of the file system calls.
const (
	// CodeExists reports a target that exists where the call must not
	// replace it: a move without Overwrite, a mkdir over a file (409).
	CodeExists = "exists"
	// CodeNotEmpty reports a non-recursive remove of a directory that has
	// entries (409).
	CodeNotEmpty = "not_empty"
)

// StatRequest describes one path, without following a symlink there.
type StatRequest struct {
	Path string `json:"path"`
}

// MkdirRequest makes a directory and any missing parents, like mkdir -p:
// one that exists already is not an error.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"` // permission bits of the new directories; 0 means 0755
}

// MoveRequest renames From to To. A symlink at either end is moved or
// replaced itself, never followed. An existing To is refused with
// CodeExists unless Overwrite.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// RemoveRequest removes a file, a symlink (not what it points to) or an
// empty directory; a directory with entries only when Recursive.
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FSHandler carries out the file system calls on the guest side.
type FSHandler interface {
	Stat(ctx context.Context, req StatRequest) (FileInfo, error)
	Mkdir(ctx context.Context, req MkdirRequest) (FileInfo, error)
	Move(ctx context.Context, req MoveRequest) (FileInfo, error)
	Remove(ctx context.Context, req RemoveRequest) error
}

// serveFS serves op if it is one of the file system calls; handled is
// false for any other op.
func serveFS(ctx context.Context, h FSHandler, op string, decode func(any) error) (out any, handled bool, err error) {
	switch op {
	case OpStat:
		var req StatRequest
		if err = decode(&req); err == nil {
			out, err = h.Stat(ctx, req)
		}
	case OpMkdir:
		var req MkdirRequest
		if err = decode(&req); err == nil {
			out, err = h.Mkdir(ctx, req)
		}
	case OpMove:
		var req MoveRequest
		if err = decode(&req); err == nil {
			out, err = h.Move(ctx, req)
		}
	case OpRemove:
		var req RemoveRequest
		if err = decode(&req); err == nil {
			out, err = struct{}{}, h.Remove(ctx, req)
		}
	default:
		return nil, false, nil
	}
	return out, true, err
}

// Stat describes a path.
func (c *Client) Stat(ctx context.Context, req StatRequest) (FileInfo, error) {
	var r FileInfo
	err := c.do(ctx, OpStat, req, &r)
	return r, err
}

// Mkdir makes a directory and its missing parents.
func (c *Client) Mkdir(ctx context.Context, req MkdirRequest) (FileInfo, error) {
	var r FileInfo
	err := c.do(ctx, OpMkdir, req, &r)
	return r, err
}

// Move renames a file or directory and describes it at its new path.
func (c *Client) Move(ctx context.Context, req MoveRequest) (FileInfo, error) {
	var r FileInfo
	err := c.do(ctx, OpMove, req, &r)
	return r, err
}

// Remove removes a path.
func (c *Client) Remove(ctx context.Context, req RemoveRequest) error {
	return c.do(ctx, OpRemove, req, nil)
}
