package bench

// The streamed exec benchmark: the rate of a command's output through the
// NDJSON stream, beside the buffered exec's rate in the same run.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// bufferedMiB is the output of the buffered exec, the stream's baseline:
// the most its answer carries.
const bufferedMiB = 16

// execStreamSamples is how many timed runs each rate is the median of.
const execStreamSamples = 3

// benchExecStream times StreamMiB of `head -c` output through a streamed
// exec, and bufferedMiB through the buffered one, in a sandbox of its own.
func (b *bencher) benchExecStream(ctx context.Context, info apitype.Info) result {
	sb, err := b.createOne(ctx, info, apitype.CreateSandboxRequest{})
	if err != nil {
		return failedResult("exec_stream", unitMBps, fmt.Errorf("create a sandbox: %w", err))
	}
	defer b.destroy(ctx, sb.ID)
	streamed := int64(b.o.StreamMiB) << 20
	stream := func() (int64, error) {
		var n countingWriter
		st, err := b.cl.ExecStream(ctx, sb.ID, sb.Token, outputCmd(streamed), &n, io.Discard)
		if err == nil && st.ExitCode != 0 {
			err = fmt.Errorf("exit %d", st.ExitCode)
		}
		return int64(n), err
	}
	buffered := func() (int64, error) {
		res, err := b.cl.Exec(ctx, sb.ID, sb.Token, outputCmd(bufferedMiB<<20))
		if err == nil && (res.ExitCode != 0 || res.Truncated) {
			err = fmt.Errorf("exit %d, truncated %v", res.ExitCode, res.Truncated)
		}
		return int64(len(res.Stdout)), err
	}
	r, err := b.rates("exec_stream", streamed, stream)
	if err != nil {
		return failedResult("exec_stream", unitMBps, err)
	}
	bl, err := b.rates("exec_buffered", bufferedMiB<<20, buffered)
	if err != nil {
		b.logf("no buffered exec baseline: %v", err)
		return r
	}
	r.Baseline = &baseline{Name: "buffered exec of " + strconv.Itoa(bufferedMiB) + " MiB", P50: bl.P50, P99: bl.P99, N: bl.N}
	b.logf("exec_stream: %.1f MB/s streamed (%d MiB), %.1f MB/s buffered (%d MiB)", r.P50, b.o.StreamMiB, bl.P50, bufferedMiB)
	b.logSourceRate(ctx, sb, streamed)
	return r
}

// logSourceRate logs how fast the command makes its output with nothing
// reading it but /dev/null: the most a stream of it could carry.
func (b *bencher) logSourceRate(ctx context.Context, sb apitype.SandboxInfo, size int64) {
	req := outputCmd(size)
	req.Shell += " >/dev/null"
	t0 := time.Now()
	res, err := b.cl.Exec(ctx, sb.ID, sb.Token, req)
	d := time.Since(t0)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	if err != nil {
		b.logf("exec_stream: the command alone: %v", err)
		return
	}
	b.logf("exec_stream: the command alone, to /dev/null: %.1f MB/s", float64(size)/1e6/d.Seconds())
}

// rates runs once untimed, then execStreamSamples times, each of which
// must move size bytes, and summarizes the rates.
func (b *bencher) rates(name string, size int64, once func() (int64, error)) (result, error) {
	var rates []float64
	for i := range execStreamSamples + 1 {
		t0 := time.Now()
		n, err := once()
		d := time.Since(t0)
		if err == nil && n != size {
			err = fmt.Errorf("got %d bytes, want %d", n, size)
		}
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", name, err)
		}
		if i > 0 {
			rates = append(rates, float64(n)/1e6/d.Seconds())
		}
	}
	return rateSamples(name, rates), nil
}

// outputCmd prints n bytes of text: JSON carries it unescaped.
func outputCmd(n int64) apitype.ExecRequest {
	return apitype.ExecRequest{Shell: "yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c " + strconv.FormatInt(n, 10), TimeoutSecs: 600}
}

// countingWriter counts and drops what is written to it.
type countingWriter int64

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}
