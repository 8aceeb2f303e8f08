package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// ImportImage uploads an OCI image archive (an OCI layout tar or a
// `docker save` archive) as image name, writing the daemon's progress
// lines to progress (may be nil). The upload streams: archive is read
// once, so the call is never retried. Only ctx bounds it: a large image
// takes minutes.
func (c *Client) ImportImage(ctx context.Context, name string, archive io.Reader, progress io.Writer) (apitype.ImageInfo, error) {
	return c.importImage(ctx, url.Values{"name": {name}}, archive, progress)
}

// PullImage has the daemon pull ref from its registry as image name.
func (c *Client) PullImage(ctx context.Context, name, ref string, progress io.Writer) (apitype.ImageInfo, error) {
	return c.importImage(ctx, url.Values{"name": {name}, "ref": {ref}}, nil, progress)
}

func (c *Client) importImage(ctx context.Context, q url.Values, body io.Reader, progress io.Writer) (apitype.ImageInfo, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/images", q, "")
	if err != nil {
		return apitype.ImageInfo{}, err
	}
	if body != nil {
		req.Body = io.NopCloser(body)
		req.Header.Set("Content-Type", "application/x-tar")
	}
	req.Header.Set("Accept", apitype.ContentTypeNDJSON+", application/json")
	if progress == nil {
		progress = io.Discard
	}
	return readResult(c, req, "image import", func(ev apitype.ImageImportEvent) (*apitype.ImageInfo, error) {
		if ev.Error != nil {
			return nil, streamError(*ev.Error)
		}
		if ev.Image == nil {
			if _, err := io.WriteString(progress, ev.Output+"\n"); err != nil {
				return nil, fmt.Errorf("cove: write the import's progress: %w", err)
			}
		}
		return ev.Image, nil
	})
}

// ListImages lists the daemon's images, newest first.
func (c *Client) ListImages(ctx context.Context) ([]apitype.ImageInfo, error) {
	var out []apitype.ImageInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/images", nil, "", nil, &out)
	return out, err
}

// GetImage describes an image by name (its current image) or id.
func (c *Client) GetImage(ctx context.Context, nameOrID string) (apitype.ImageInfo, error) {
	var out apitype.ImageInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/images/"+url.PathEscape(nameOrID), nil, "", nil, &out)
	return out, err
}

// DeleteImage removes a name and all its images, or one image by id. The
// daemon refuses an image a sandbox or snapshot uses (ErrConflict).
func (c *Client) DeleteImage(ctx context.Context, nameOrID string) ([]string, error) {
	var out apitype.DeleteImageResponse
	err := c.call(ctx, 0, http.MethodDelete, "/v1/images/"+url.PathEscape(nameOrID), nil, "", nil, &out)
	return out.Removed, err
}
