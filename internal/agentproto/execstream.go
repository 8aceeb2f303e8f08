package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// OpExecStream runs an ExecRequest like OpExec, but streams the command's
// output as it is produced: a Response once the command runs, then Chunk
// records of stdout and stderr, then one JSON record, an ExecStatus, and
// the End frame. The output has no cap: the agent reads the command's
// pipes only as fast as the host reads the stream. The host closing the
// stream kills the command's process group.
const OpExecStream = "exec_stream"

// ExecStatus is how a streamed exec ended.
type ExecStatus struct {
	ExitCode   int    `json:"exit_code"`        // -1 when a signal ended it
	Signal     string `json:"signal,omitempty"` // "SIGKILL", when a signal ended it
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationMs int64  `json:"duration_ms"`
}

// ExecStreamHandler runs streamed execs on the guest side.
type ExecStreamHandler interface {
	// ExecStream runs req, sending its output to out, and returns how it
	// ended. An error returned before out.Start answers the call; after
	// it, the call ends without its End frame.
	ExecStream(ctx context.Context, req ExecRequest, out *ExecOutput) (ExecStatus, error)
}

// ExecOutput is where a streamed exec's output goes: Writer gives each of
// the command's streams an io.Writer of Chunk records. The first write,
// or Start, answers the call. Writes are serialised, so that frames of
// stdout and stderr never interleave. Once the stream fails (the host is
// gone) or Freeze was called, writes are swallowed: the command must not
// die of a failed write, and is killed by the host's cancel instead.
type ExecOutput struct {
	mu      sync.Mutex
	w       io.Writer
	started bool
	frozen  bool
	err     error
}

// Start answers the call with an empty Response, once.
func (o *ExecOutput) Start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.startLocked()
}

func (o *ExecOutput) startLocked() error {
	if !o.started {
		o.started = true
		o.err = writeResponse(o.w, struct{}{}, nil)
	}
	return o.err
}

// Freeze makes later writes no-ops: the status is about to be sent.
func (o *ExecOutput) Freeze() {
	o.mu.Lock()
	o.frozen = true
	o.mu.Unlock()
}

// Writer returns the writer of stream (Stdout or Stderr).
func (o *ExecOutput) Writer(stream byte) io.Writer {
	return chunkWriter{o: o, stream: stream}
}

type chunkWriter struct {
	o      *ExecOutput
	stream byte
}

func (c chunkWriter) Write(p []byte) (int, error) {
	o := c.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.frozen || o.startLocked() != nil {
		return len(p), nil
	}
	o.err = WriteChunk(o.w, c.stream, p)
	return len(p), nil
}

// finish sends the status and the End frame.
func (o *ExecOutput) finish(st ExecStatus) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.startLocked(); err != nil {
		return err
	}
	if err := WriteJSON(o.w, st); err != nil {
		return err
	}
	return WriteEnd(o.w)
}

// serveExecStream is the StreamServer of OpExecStream.
func serveExecStream(h ExecStreamHandler) StreamServer {
	return func(ctx context.Context, st *yamux.Stream, op string, decode func(any) error) bool {
		if op != OpExecStream {
			return false
		}
		var req ExecRequest
		if err := decode(&req); err != nil {
			writeResponse(st, nil, err)
			return true
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			discard := func([]byte) error { return nil }
			ReadHostFrames(st, discard, discard)
			cancel()
			// The host reads no more: a write waiting for room in the
			// stream's window would wait for good.
			st.SetWriteDeadline(time.Now())
		}()
		out := &ExecOutput{w: st}
		status, err := h.ExecStream(ctx, req, out)
		out.mu.Lock()
		started := out.started
		out.mu.Unlock()
		switch {
		case err != nil && !started:
			writeResponse(st, nil, err)
		case err == nil:
			out.finish(status)
		}
		return true
	}
}

// ExecStream runs a command, calling out with each piece of its output
// as it arrives, and returns how the command ended. An error from out
// ends the call, which kills the command, and is returned as it is.
func (c *Client) ExecStream(ctx context.Context, req ExecRequest, out func(stream byte, p []byte) error) (ExecStatus, error) {
	var status ExecStatus
	s, err := c.OpenStream(ctx, OpExecStream, req, nil)
	if err != nil {
		return status, err
	}
	defer s.Close()
	gotStatus := false
	for {
		rec, err := s.Next()
		if err != nil {
			return status, c.ctxErr(ctx, fmt.Errorf("agentproto: read %s: %w", OpExecStream, err))
		}
		switch rec.Kind {
		case RecordChunk:
			if err := out(rec.Stream, rec.Data); err != nil {
				return status, err
			}
		case RecordJSON:
			if err := rec.Decode(&status); err != nil {
				return status, fmt.Errorf("agentproto: decode %s status: %w", OpExecStream, err)
			}
			gotStatus = true
		case RecordEnd:
			if !gotStatus {
				return status, errors.New("agentproto: exec_stream ended without a status")
			}
			return status, nil
		default:
			return status, fmt.Errorf("agentproto: unexpected record kind %d in %s", rec.Kind, OpExecStream)
		}
	}
}
