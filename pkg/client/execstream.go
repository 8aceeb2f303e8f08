package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// ExecStream runs a command and copies its output to stdout and stderr as
// the command produces it, with no cap, and returns how it ended. A slow
// writer slows the command; a writer's error ends the call, which kills
// the command in the sandbox, and is returned. A sandbox that dies mid-way
// is an *Error as from any call. The call is bounded like Exec. A daemon
// too old to stream answers with the buffered JSON, whose output is
// written in one piece (and may be truncated).
func (c *Client) ExecStream(ctx context.Context, id, sandboxToken string, req apitype.ExecRequest, stdout, stderr io.Writer) (apitype.ExitStatus, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+secs(req.TimeoutSecs))
		defer cancel()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return apitype.ExitStatus{}, fmt.Errorf("cove: encode exec: %w", err)
	}
	var resp *http.Response
	err = retry(ctx, func() error {
		hreq, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "/exec"), nil, sandboxToken)
		if err != nil {
			return err
		}
		setJSONBody(hreq, b)
		hreq.Header.Set("Accept", apitype.ContentTypeNDJSON)
		r, err := c.hc.Do(hreq)
		if err != nil {
			return err
		}
		if r.StatusCode/100 != 2 {
			defer r.Body.Close()
			return errorFrom(r)
		}
		resp = r
		return nil
	})
	if err != nil {
		return apitype.ExitStatus{}, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != apitype.ContentTypeNDJSON && mt != apitype.ContentTypeSSE {
		return execBuffered(resp.Body, stdout, stderr)
	}
	return readExecStream(resp, stdout, stderr)
}

// readExecStream copies a streamed exec's chunks to stdout and stderr and
// returns its last record's exit status or error.
func readExecStream(resp *http.Response, stdout, stderr io.Writer) (apitype.ExitStatus, error) {
	var exit *apitype.ExitStatus
	err := eachRecord(resp, func(line []byte) error {
		var ev apitype.OutputEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("cove: decode an exec record: %w", err)
		}
		switch {
		case ev.Error != nil:
			return streamError(*ev.Error)
		case ev.Exit != nil:
			exit = ev.Exit
			return nil
		}
		w := stdout
		if ev.Stream == "stderr" {
			w = stderr
		}
		_, err := w.Write(ev.Bytes())
		return err
	})
	if err != nil {
		return apitype.ExitStatus{}, err
	}
	if exit == nil {
		return apitype.ExitStatus{}, fmt.Errorf("cove: the exec stream ended without an exit status: %w", io.ErrUnexpectedEOF)
	}
	return *exit, nil
}

// execBuffered writes an old daemon's buffered answer.
func execBuffered(body io.Reader, stdout, stderr io.Writer) (apitype.ExitStatus, error) {
	var res apitype.ExecResponse
	if err := json.NewDecoder(body).Decode(&res); err != nil {
		return apitype.ExitStatus{}, fmt.Errorf("cove: decode exec answer: %w", err)
	}
	if _, err := io.WriteString(stdout, res.Stdout); err != nil {
		return apitype.ExitStatus{}, err
	}
	if _, err := io.WriteString(stderr, res.Stderr); err != nil {
		return apitype.ExitStatus{}, err
	}
	return apitype.ExitStatus{ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationMs: res.DurationMs}, nil
}
