package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// worker is one client: it draws ops from the mix and runs them on the
// sandboxes it made, which no other client touches.
type worker struct {
	r   *runner
	rng *rand.Rand
	ops []string
	cum []int
	sbs []held
	// script is drawn from first, in order: client 0 runs every op of
	// the mix once before it draws at random, so that a short run still
	// covers the mix.
	script []string
}

// coverScript orders the ops of the mix so that each can run when its
// turn comes to a client that starts with nothing and holds two: a
// sandbox made first, branched while there is room, killed, then made
// again.
func coverScript(m Mix) []string {
	first, last := OpCreate, OpSpawn
	if m[OpCreate] == 0 {
		first, last = OpSpawn, ""
	}
	var out []string
	for _, op := range []string{first, OpExec, OpFiles, OpBranch, OpKill, last} {
		if m[op] > 0 {
			out = append(out, op)
		}
	}
	return out
}

// held is a sandbox a worker made.
type held struct {
	id, token string
	// tag is the branch snapshot it was spawned from, deleted after it.
	tag string
}

// mismatchError is an op whose call succeeded with the wrong answer.
type mismatchError struct{ what string }

func (e mismatchError) Error() string { return e.what }

// loop runs ops until the run has no more. Ops run under ctx, not stop:
// the one in flight when the time is up finishes.
func (w *worker) loop(ctx, stop context.Context) {
	// The script's ops were claimed when it was made (setAside).
	for (len(w.script) > 0 && stop.Err() == nil) || w.r.next(stop) {
		op, ok := w.choose(stop)
		if !ok {
			return
		}
		opCtx := ctx
		if makes(op) {
			// A create cut short by ^C may still make its sandbox, and
			// then nobody would know its id to delete it: let it finish.
			opCtx = context.WithoutCancel(ctx)
		}
		t0 := time.Now()
		err := w.do(opCtx, op)
		if ctx.Err() != nil {
			return // interrupted: the op says nothing of the daemon
		}
		w.r.st.record(op, time.Since(t0), err)
	}
}

// choose draws an op and makes it one that can run now: an op on a
// sandbox when the worker holds none makes one; an op making a sandbox
// when the worker holds its share, or the run its cap, is a kill. A
// making op returned has its place under the cap taken.
// A scripted op waits for a place rather than turning into a kill, and
// one that cannot run yet stays first in the script.
func (w *worker) choose(stop context.Context) (string, bool) {
	if len(w.script) == 0 {
		return w.fit(stop, w.ops[sortSearch(w.cum, w.rng.IntN(w.cum[len(w.cum)-1]))], false)
	}
	want := w.script[0]
	op, ok := w.fit(stop, want, true)
	if op == want {
		w.script = w.script[1:]
	} else if ok && !w.r.claim() {
		// An op in its place is one more than the script set aside.
		return "", false
	}
	return op, ok
}

// fit makes op one that can run now (see choose); wait makes a making op
// wait for a place under the run's cap even while the worker holds one.
func (w *worker) fit(stop context.Context, op string, wait bool) (string, bool) {
	if op != OpCreate && op != OpSpawn && len(w.sbs) == 0 {
		op = OpSpawn
		if w.r.o.Mix[OpSpawn] == 0 {
			op = OpCreate
		}
	}
	if !makes(op) {
		return op, true
	}
	if wait {
		defer w.r.queued.Store(false)
	}
	for {
		if len(w.sbs) >= w.r.o.PerClient {
			return OpKill, true
		}
		if w.r.acquire(wait) {
			return op, true
		}
		if wait {
			w.r.queued.Store(true)
		}
		if len(w.sbs) > 0 && !wait {
			return OpKill, true
		}
		// Others hold every place; one frees soon.
		select {
		case <-stop.Done():
			return "", false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sortSearch returns the index of the first cumulative weight above x.
func sortSearch(cum []int, x int) int {
	i, _ := slices.BinarySearch(cum, x+1)
	return i
}

// makes reports whether op makes a sandbox.
func makes(op string) bool { return op == OpCreate || op == OpSpawn || op == OpBranch }

// do runs one op.
func (w *worker) do(ctx context.Context, op string) error {
	switch op {
	case OpCreate:
		return w.create(ctx, apitype.CreateSandboxRequest{})
	case OpSpawn:
		return w.create(ctx, apitype.CreateSandboxRequest{SnapshotTag: w.r.o.Snapshot})
	case OpBranch:
		return w.branch(ctx)
	case OpKill:
		return w.kill(ctx, w.rng.IntN(len(w.sbs)))
	}
	i := w.rng.IntN(len(w.sbs))
	var err error
	if op == OpExec {
		err = w.exec(ctx, w.sbs[i])
	} else {
		err = w.files(ctx, w.sbs[i])
	}
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrGone) {
		// It died or expired: make way for another.
		w.drop(i)
	}
	return err
}

func (w *worker) create(ctx context.Context, req apitype.CreateSandboxRequest) error {
	req.N, req.TTLSecs, req.Labels = 1, w.r.ttl(), w.r.labels()
	sbs, err := w.r.cl.CreateSandboxes(ctx, req)
	for i, sb := range sbs {
		if i > 0 {
			w.r.live.Add(1) // more than asked for: counted, and killed like the rest
		}
		w.sbs = append(w.sbs, held{id: sb.ID, token: sb.Token})
	}
	if len(sbs) == 0 {
		w.r.release()
	}
	if err == nil && len(sbs) != 1 {
		err = mismatchError{fmt.Sprintf("asked for 1 sandbox, got %d", len(sbs))}
	}
	return err
}

func (w *worker) branch(ctx context.Context) error {
	src := w.sbs[w.rng.IntN(len(w.sbs))]
	tag := w.r.tagPrefix() + strconv.FormatInt(w.r.seq.Add(1), 10)
	br, err := w.r.cl.Branch(ctx, src.id, src.token, apitype.BranchRequest{Tag: tag, N: 1, Labels: w.r.labels()})
	if err != nil {
		w.r.release()
		// A branch that failed may still have saved its snapshot.
		w.r.forget(ctx, tag)
		return err
	}
	if len(br.Children) != 1 {
		w.r.release()
		for _, c := range br.Children {
			w.r.live.Add(1)
			w.sbs = append(w.sbs, held{id: c.ID, token: c.Token})
		}
		w.r.forget(ctx, tag)
		return mismatchError{fmt.Sprintf("branch with 1 child made %d", len(br.Children))}
	}
	w.sbs = append(w.sbs, held{id: br.Children[0].ID, token: br.Children[0].Token, tag: tag})
	return nil
}

// kill deletes the worker's sandbox i, then the branch snapshot it came
// from.
func (w *worker) kill(ctx context.Context, i int) error {
	sb := w.sbs[i]
	err := w.r.cl.DeleteSandbox(ctx, sb.id)
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return err // kept, for the clean-up to try again
	}
	w.drop(i)
	w.r.forget(ctx, sb.tag)
	return err
}

// drop forgets sandbox i, freeing its place.
func (w *worker) drop(i int) {
	w.sbs = slices.Delete(w.sbs, i, i+1)
	w.r.release()
}

const execWant = "cove-loadtest\n"

func (w *worker) exec(ctx context.Context, sb held) error {
	res, err := w.r.cl.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Args: []string{"echo", "cove-loadtest"}, TimeoutSecs: 60})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Stdout != execWant {
		return mismatchError{fmt.Sprintf("exec echo: exit %d, stdout %q", res.ExitCode, res.Stdout)}
	}
	return nil
}

// files puts a file of random bytes and gets it back.
func (w *worker) files(ctx context.Context, sb held) error {
	data := make([]byte, w.r.o.FileBytes)
	for i := range data {
		data[i] = byte(w.rng.Uint32())
	}
	path := "/tmp/loadtest-" + strconv.FormatUint(w.rng.Uint64(), 16)
	if _, err := w.r.cl.PutFile(ctx, sb.id, sb.token, path, 0o644, bytes.NewReader(data), int64(len(data))); err != nil {
		return err
	}
	body, _, err := w.r.cl.GetFile(ctx, sb.id, sb.token, path)
	if err != nil {
		return err
	}
	defer body.Close()
	got, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("read %s back: %w", path, err)
	}
	if !bytes.Equal(got, data) {
		return mismatchError{fmt.Sprintf("%s: put %d bytes, got %d different ones back", path, len(data), len(got))}
	}
	return nil
}

// cleanup deletes every sandbox the worker holds, even after ^C.
func (w *worker) cleanup(ctx context.Context) {
	for len(w.sbs) > 0 {
		sb := w.sbs[len(w.sbs)-1]
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		err := w.r.cl.DeleteSandbox(dctx, sb.id)
		cancel()
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			fmt.Fprintf(w.r.log, "loadtest: delete sandbox %s: %v\n", sb.id, err)
		}
		w.drop(len(w.sbs) - 1)
		w.r.forget(ctx, sb.tag)
	}
}
