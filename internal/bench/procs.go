package bench

// Background processes: how soon a process's first byte of output reaches
// a follow client, beside an exec's round trip in the same sandbox.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// errFirstByte stops a follow at its first byte.
var errFirstByte = errors.New("first byte")

// benchProcFirstByte starts `echo` as a background process, again and
// again, and times from the start call until the first byte of its output
// arrives on a follow opened after the start answered: what a client that
// starts a server and tails it waits. The baseline is exec of `true` in
// the same sandbox, timed in the same run.
func (b *bencher) benchProcFirstByte(ctx context.Context, info apitype.Info) result {
	const name = "proc_first_byte"
	sb, err := b.createOne(ctx, info, apitype.CreateSandboxRequest{})
	if err != nil {
		return failedResult(name, unitMs, fmt.Errorf("create the sandbox: %w", err))
	}
	defer b.destroy(ctx, sb.ID)
	once := func() (time.Duration, error) {
		t0 := time.Now()
		p, err := b.cl.StartProcess(ctx, sb.ID, sb.Token, apitype.ExecRequest{Args: []string{"echo", "ready"}})
		if err != nil {
			return 0, err
		}
		var d time.Duration
		err = b.cl.FollowOutput(ctx, sb.ID, sb.Token, fmt.Sprint(p.Pid), 0, func(ev apitype.OutputEvent) error {
			if len(ev.Bytes()) == 0 {
				return nil
			}
			d = time.Since(t0)
			if !strings.HasPrefix(string(ev.Bytes()), "r") {
				return fmt.Errorf("echo's first output %q", ev.Bytes())
			}
			return errFirstByte
		})
		if !errors.Is(err, errFirstByte) {
			return 0, fmt.Errorf("follow pid %d: no output (%v)", p.Pid, err)
		}
		return d, nil
	}
	lat, err := b.sample(name, 3, b.o.ProcFirstBytes, once)
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	r := latencyResult(name, lat)
	if ex := b.benchExec(ctx, sb); ex.Error == "" {
		r.Baseline = &baseline{Name: "exec true", P50: ex.P50, P99: ex.P99, N: ex.N}
	} else {
		b.logf("no exec baseline: %s", ex.Error)
	}
	return r
}
