package sandbox

import (
	"context"
	"io"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/outtext"
)

// A snapshot's warm command (pip install, say) can run for minutes, and the
// agent's exec answers only when it ends: its output goes to a file in
// the sandbox instead (Service.warmLog), which the daemon reads as it
// grows. The file is removed before the checkpoint, so no child inherits it.
const (
	defaultWarmLog = "/tmp/.cove-warm.log"
	warmPoll       = 200 * time.Millisecond
	warmTimeout    = 10 * time.Minute
	// warmTail is how much of the output is kept for the error of a
	// command that fails.
	warmTail = 4 << 10
)

// runWarm runs a snapshot builder's warm command, copying its output to
// out (if set) while it runs. A command that fails is ErrInvalid, with
// the last line of its output.
func runWarm(ctx context.Context, a *agentproto.Client, warm, log string, out io.Writer) error {
	// The shell sends its own output to the file, then runs the command as
	// `sh -c` would.
	req := agentproto.ExecRequest{Shell: "exec >" + log + " 2>&1\n" + warm, TimeoutMs: warmTimeout.Milliseconds()}
	res, tail, err := runLogged(ctx, a, req, log, out)
	switch {
	case err != nil:
		return err
	case res.TimedOut:
		return invalidf("warm command did not finish within %s: %s", warmTimeout, outtext.LastLine(tail))
	case res.ExitCode != 0:
		return invalidf("warm command exited %d: %s", res.ExitCode, outtext.LastLine(tail))
	}
	return nil
}

// runLogged runs req, a command that sends its output to the file log,
// copying what log holds to out (if set) as it grows, and removes log
// once the command is done. It returns the command's result and the last
// of its output.
func runLogged(ctx context.Context, a *agentproto.Client, req agentproto.ExecRequest, log string, out io.Writer) (agentproto.ExecResult, string, error) {
	type result struct {
		res agentproto.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := a.Exec(ctx, req)
		done <- result{res, err}
	}()
	tail := &tailWriter{max: warmTail}
	w := io.Writer(tail)
	if out != nil {
		w = io.MultiWriter(tail, out)
	}
	var off int64
	t := time.NewTicker(warmPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			off = copyFrom(ctx, a, log, off, w)
		case r := <-done:
			copyFrom(ctx, a, log, off, w)
			a.Exec(ctx, agentproto.ExecRequest{Args: []string{"rm", "-f", log}})
			if r.err != nil {
				return r.res, tail.String(), mapErr(r.err)
			}
			return r.res, tail.String(), nil
		}
	}
}

// copyFrom copies what the warm log holds past off to w, and returns the
// new offset. A log not there yet has nothing to copy.
func copyFrom(ctx context.Context, a *agentproto.Client, log string, off int64, w io.Writer) int64 {
	_, rc, err := a.Get(ctx, agentproto.GetRequest{Path: log, Offset: off})
	if err != nil {
		return off
	}
	defer rc.Close()
	n, _ := io.Copy(w, rc)
	return off + n
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.buf) }
