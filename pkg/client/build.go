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
	return readResult(c, req, "snapshot build", func(ev apitype.SnapshotBuildEvent) (*apitype.SnapshotInfo, error) {
		if ev.Error != nil {
			return nil, streamError(*ev.Error)
		}
		if ev.Snapshot == nil {
			if _, err := io.WriteString(out, ev.Output); err != nil {
				return nil, fmt.Errorf("cove: write the build's output: %w", err)
			}
		}
		return ev.Snapshot, nil
	})
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

// readResult sends a request whose answer is either plain JSON of R or
// an NDJSON stream of events E ending in a result or an error. of says
// what an event carries: its result, its error, or neither, having passed
// on its progress (an error from that ends the read).
func readResult[E, R any](c *Client, req *http.Request, what string, of func(E) (*R, error)) (R, error) {
	var zero R
	resp, err := c.hc.Do(req)
	if err != nil {
		return zero, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return zero, errorFrom(resp)
	}
	dec := json.NewDecoder(resp.Body)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != apitype.ContentTypeNDJSON {
		var r R
		if err := dec.Decode(&r); err != nil {
			return zero, fmt.Errorf("cove: decode the %s's answer: %w", what, err)
		}
		return r, nil
	}
	for {
		var ev E
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return zero, fmt.Errorf("cove: the %s's answer ended before its result: %w", what, err)
		}
		r, err := of(ev)
		switch {
		case err != nil:
			return zero, err
		case r != nil:
			return *r, nil
		}
	}
}
