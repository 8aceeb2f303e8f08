package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// processPath is the path of a process's resource suffix; ref is a pid or
// a tag.
func processPath(id, ref, suffix string) string {
	return sandboxPath(id, "/processes/"+url.PathEscape(ref)+suffix)
}

// StartProcess starts req as a background process (Background is set for
// the caller) and returns at once with its pid.
func (c *Client) StartProcess(ctx context.Context, id, sandboxToken string, req apitype.ExecRequest) (apitype.ProcessInfo, error) {
	req.Background = true
	var out apitype.ProcessInfo
	err := c.call(ctx, 0, http.MethodPost, sandboxPath(id, "/exec"), nil, sandboxToken, req, &out)
	return out, err
}

// Processes lists the background processes cove started in the sandbox
// and, with all, its other processes.
func (c *Client) Processes(ctx context.Context, id, sandboxToken string, all bool) ([]apitype.ProcessInfo, error) {
	var q url.Values
	if all {
		q = url.Values{"all": {"true"}}
	}
	var out apitype.ProcessList
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, "/processes"), q, sandboxToken, nil, &out)
	return out.Processes, err
}

// Process describes a background process by pid or tag; an unknown one is
// ErrNotFound.
func (c *Client) Process(ctx context.Context, id, sandboxToken, ref string) (apitype.ProcessInfo, error) {
	var out apitype.ProcessInfo
	err := c.call(ctx, 0, http.MethodGet, processPath(id, ref, ""), nil, sandboxToken, nil, &out)
	return out, err
}

// RemoveProcess forgets an exited process, its status and its output. A
// running one is ErrConflict.
func (c *Client) RemoveProcess(ctx context.Context, id, sandboxToken, ref string) error {
	return c.call(ctx, 0, http.MethodDelete, processPath(id, ref, ""), nil, sandboxToken, nil, nil)
}

// ProcessOutput reads at most limit bytes (0: the daemon's default) of a
// process's output from offset. Lost counts bytes before the answer's
// Offset that the process's ring no longer held; Exit is set once the
// process ended and nothing is left to read.
func (c *Client) ProcessOutput(ctx context.Context, id, sandboxToken, ref string, offset, limit int64) (apitype.ProcessOutput, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	var out apitype.ProcessOutput
	err := c.call(ctx, 0, http.MethodGet, processPath(id, ref, "/output"), q, sandboxToken, nil, &out)
	return out, err
}

// FollowOutput calls each with a process's output from offset on as it is
// produced, until the process ends (the last event has Exit), ctx ends or
// each fails. Only ctx bounds it. An error the daemon reports mid-stream
// is returned as an *Error.
func (c *Client) FollowOutput(ctx context.Context, id, sandboxToken, ref string, offset int64, each func(apitype.OutputEvent) error) error {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "follow": {"true"}}
	req, err := c.newRequest(ctx, http.MethodGet, processPath(id, ref, "/output"), q, sandboxToken)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", apitype.ContentTypeNDJSON)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp)
	}
	ended := false
	err = eachRecord(resp, func(line []byte) error {
		var ev apitype.OutputEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("cove: decode an output record: %w", err)
		}
		if ev.Error != nil {
			return &Error{Status: http.StatusOK, Code: ev.Error.Code, Message: ev.Error.Error}
		}
		ended = ev.Exit != nil
		return each(ev)
	})
	if err == nil && !ended && ctx.Err() == nil {
		err = fmt.Errorf("cove: the output stream ended before the process did: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// WriteStdin copies r to a process's stdin as it reads it (any size), and
// closes stdin after if closeAfter. Stdin that is closed already is
// ErrConflict. Only ctx bounds it.
func (c *Client) WriteStdin(ctx context.Context, id, sandboxToken, ref string, r io.Reader, closeAfter bool) (apitype.StdinResponse, error) {
	var q url.Values
	if closeAfter {
		q = url.Values{"close": {"true"}}
	}
	req, err := c.newRequest(ctx, http.MethodPost, processPath(id, ref, "/stdin"), q, sandboxToken)
	if err != nil {
		return apitype.StdinResponse{}, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if r == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	} else {
		req.Body, req.ContentLength = io.NopCloser(r), -1
	}
	var out apitype.StdinResponse
	err = c.do(req, &out)
	return out, err
}

// Signal sends sig ("TERM", "SIGKILL", "9"; "": TERM) to a running
// process's group. A process that has exited is ErrConflict.
func (c *Client) Signal(ctx context.Context, id, sandboxToken, ref, sig string) (apitype.ProcessInfo, error) {
	var out apitype.ProcessInfo
	err := c.call(ctx, 0, http.MethodPost, processPath(id, ref, "/signal"), nil, sandboxToken, apitype.SignalRequest{Signal: sig}, &out)
	return out, err
}
