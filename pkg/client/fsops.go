package client

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// Stat describes path in the sandbox without following a symlink there.
// A path that does not exist is ErrNotFound.
func (c *Client) Stat(ctx context.Context, id, sandboxToken, path string) (apitype.FileInfo, error) {
	var out apitype.FileInfo
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, "/stat"), url.Values{"path": {path}}, sandboxToken, nil, &out)
	return out, err
}

// MakeDir makes a directory in the sandbox and any missing parents, like
// mkdir -p, with the permission bits mode (0: 0755). A directory there
// already is fine; anything else there is ErrConflict.
func (c *Client) MakeDir(ctx context.Context, id, sandboxToken, path string, mode fs.FileMode) (apitype.FileInfo, error) {
	req := apitype.MkdirRequest{Path: path}
	if mode != 0 {
		req.Mode = fmt.Sprintf("%04o", mode.Perm())
	}
	var out apitype.FileInfo
	err := c.call(ctx, 0, http.MethodPost, sandboxPath(id, "/mkdir"), nil, sandboxToken, req, &out)
	return out, err
}

// Move renames a file or directory in the sandbox and describes it at its
// new path. An existing target is ErrConflict unless overwrite. A symlink
// is moved or replaced itself, never followed.
func (c *Client) Move(ctx context.Context, id, sandboxToken, from, to string, overwrite bool) (apitype.FileInfo, error) {
	var out apitype.FileInfo
	err := c.call(ctx, 0, http.MethodPost, sandboxPath(id, "/move"), nil, sandboxToken,
		apitype.MoveRequest{From: from, To: to, Overwrite: overwrite}, &out)
	return out, err
}

// Remove removes a file, a symlink (not its target) or an empty directory
// in the sandbox; with recursive, a directory and everything in it. A
// directory with entries is ErrConflict without recursive.
func (c *Client) Remove(ctx context.Context, id, sandboxToken, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.call(ctx, 0, http.MethodDelete, sandboxPath(id, "/files"), q, sandboxToken, nil, nil)
}
