package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// PutTar extracts the tar stream read from r into the directory dir in
// the sandbox, made if missing, streaming it as it is read. Entries are
// owned by user ("": the sandbox's default user). An entry that would
// land outside dir (absolute, "..", through a symlink) is ErrBadRequest,
// naming it; what came before it stays written. Only ctx bounds the call.
func (c *Client) PutTar(ctx context.Context, id, sandboxToken, dir string, r io.Reader, user string) (apitype.TarResult, error) {
	q := url.Values{"path": {dir}}
	if user != "" {
		q.Set("user", user)
	}
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(id, "/tar"), q, sandboxToken)
	if err != nil {
		return apitype.TarResult{}, err
	}
	req.Header.Set("Content-Type", apitype.ContentTypeTar)
	req.Body = io.NopCloser(r)
	req.ContentLength = -1
	req.Header.Set("Expect", "100-continue")
	var out apitype.TarResult
	if err := c.do(req, &out); err != nil {
		return apitype.TarResult{}, err
	}
	return out, nil
}

// GetTar opens the tree under the directory dir in the sandbox as a tar
// stream: names relative to dir, symlinks as themselves. The caller must
// close it; one the sandbox could not finish fails its read.
func (c *Client) GetTar(ctx context.Context, id, sandboxToken, dir string) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/tar"), url.Values{"path": {dir}}, sandboxToken)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", apitype.ContentTypeTar)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, errorFrom(resp)
	}
	return resp.Body, nil
}

// ErrWatchEnded is what Watch returns when the watched directory itself
// was removed or moved away, after each has seen the end record.
var ErrWatchEnded = errors.New("cove: the watched directory is gone")

// Watch streams the changes in the directory path of the sandbox, and with
// recursive in every directory below it, to each, until ctx is done (nil),
// each fails (its error), or the directory goes (ErrWatchEnded). The first
// event is a ready one: changes after it are reported. A missing
// directory is ErrNotFound, a file ErrBadRequest.
func (c *Client) Watch(ctx context.Context, id, sandboxToken, path string, recursive bool, each func(apitype.WatchEvent) error) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/watch"), q, sandboxToken)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", apitype.ContentTypeNDJSON)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp)
	}
	ended := false
	err = eachRecord(resp, func(line []byte) error {
		var ev apitype.WatchEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("cove: decode a watch event: %w", err)
		}
		if ev.Type == apitype.WatchError {
			return fmt.Errorf("cove: the watch failed: %s", ev.Error)
		}
		if err := each(ev); err != nil {
			return err
		}
		ended = ev.Type == apitype.WatchEnd
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		return err
	case ended:
		return ErrWatchEnded
	}
	return fmt.Errorf("cove: the watch stream ended early: %w", io.ErrUnexpectedEOF)
}
