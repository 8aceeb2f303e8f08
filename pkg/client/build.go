package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// BuildSnapshot is CreateSnapshot that writes the warm command's output to
// out as it runs (out may be nil). A daemon that does not stream builds
// answers as CreateSnapshot, with no output.
func (c *Client) BuildSnapshot(ctx context.Context, req apitype.CreateSnapshotRequest, out io.Writer) (apitype.SnapshotInfo, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+SlowTimeout)
		defer cancel()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return apitype.SnapshotInfo{}, fmt.Errorf("cove: encode the snapshot request: %w", err)
	}
	if out == nil {
		out = io.Discard
	}
	var si apitype.SnapshotInfo
	err = retry(ctx, func() error {
		hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/snapshots", nil, "")
		if err != nil {
			return err
		}
		setJSONBody(hreq, b)
		hreq.Header.Set("Accept", apitype.ContentTypeNDJSON+", application/json")
		si, err = c.readBuild(hreq, out)
		return err
	})
	return si, err
}

// readBuild sends a build request and reads its answer: a stream of
// events, or a plain JSON snapshot or error.
func (c *Client) readBuild(req *http.Request, out io.Writer) (apitype.SnapshotInfo, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return apitype.SnapshotInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return apitype.SnapshotInfo{}, errorFrom(resp)
	}
	dec := json.NewDecoder(resp.Body)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != apitype.ContentTypeNDJSON {
		var si apitype.SnapshotInfo
		if err := dec.Decode(&si); err != nil {
			return si, fmt.Errorf("cove: decode POST /v1/snapshots answer: %w", err)
		}
		return si, nil
	}
	for {
		var ev apitype.SnapshotBuildEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return apitype.SnapshotInfo{}, fmt.Errorf("cove: the snapshot build's answer ended before its result: %w", err)
		}
		switch {
		case ev.Error != nil:
			return apitype.SnapshotInfo{}, streamError(*ev.Error)
		case ev.Snapshot != nil:
			return *ev.Snapshot, nil
		}
		if _, err := io.WriteString(out, ev.Output); err != nil {
			return apitype.SnapshotInfo{}, fmt.Errorf("cove: write the build's output: %w", err)
		}
	}
}

// streamError is the *Error of an error that ended a stream, which comes
// after its 200: the status is the one its code stands for.
func streamError(b apitype.ErrorBody) *Error {
	e := &Error{Status: http.StatusInternalServerError, Code: b.Code, Message: b.Error}
	for _, s := range sentinels {
		if s.Code == b.Code {
			e.Status = s.Status
			break
		}
	}
	return e
}
