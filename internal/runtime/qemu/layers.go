package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// maxLayers bounds a running VM's qcow2 chain. Each branch stacks a layer
// on its source, each switch-over reopens every layer (a migration
// inactivates the disk, cont activates it again), and a read the top
// layer misses walks down the chain: a VM branched again and again would
// pause ever longer and read ever slower, and so would the children of its
// snapshots. Past it, the layers between the first and the active one are
// streamed into the active one in the background.
const maxLayers = 3

// flattenJob is the id of a VM's streaming job.
const flattenJob = "flatten"

// flatten starts streaming a VM's middle layers into its active one when
// its chain is longer than maxLayers. The first layer stays: it is the
// VM's own first overlay or, in a clone, the layer it shares with every
// other clone of its snapshot. The chain in st changes only once the job
// is seen done (settleLayers).
func (r *Runtime) flatten(ctx context.Context, q *qmp, st *vmState) error {
	if len(st.Layers) <= maxLayers {
		return nil
	}
	// The header names the first layer by its bare file name, as every
	// layer's header names its backing.
	return q.Execute(ctx, "block-stream", map[string]any{
		"job-id": flattenJob, "device": activeNode(st),
		"base-node": nodeName(layerIndex(st.Layers[0])), "backing-file": st.Layers[0],
	}, nil)
}

// settleLayers waits for a VM's streaming job to end and brings st's
// chain up to date with QEMU's: once a stream has finished, the middle
// layers are closed and their files removed (the snapshots holding them
// have their own links). The wait costs the caller time, never a pause of
// the VM, and keeps the chain bounded however often it is branched. A
// failed stream leaves the chain whole.
func (r *Runtime) settleLayers(ctx context.Context, q *qmp, st *vmState) error {
	if len(st.Layers) <= 2 {
		return nil
	}
	if err := waitJob(ctx, q, flattenJob); err != nil {
		return err
	}
	var blocks []struct {
		Inserted *struct {
			NodeName string `json:"node-name"`
			Depth    int    `json:"backing_file_depth"`
		} `json:"inserted"`
	}
	if err := q.Execute(ctx, "query-block", nil, &blocks); err != nil {
		return err
	}
	for _, b := range blocks {
		// The top's backing files: the layers below it and the base.
		if b.Inserted == nil || b.Inserted.NodeName != activeNode(st) || b.Inserted.Depth != 2 {
			continue
		}
		dir := r.vmDir(st.ID)
		middle := st.Layers[1 : len(st.Layers)-1]
		st.Layers = []string{st.Layers[0], st.Layers[len(st.Layers)-1]}
		if err := r.writeState(dir, *st); err != nil {
			return err
		}
		// Every layer is a node the runtime named, unused now but open
		// until deleted: from the top down, as each backs the next.
		for i := len(middle) - 1; i >= 0; i-- {
			l := middle[i]
			if err := q.Execute(ctx, "blockdev-del", map[string]any{"node-name": nodeName(layerIndex(l))}, nil); err != nil {
				return err
			}
			if err := os.Remove(filepath.Join(dir, l)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		r.log.Debug("layers flattened", "id", st.ID, "layers", st.Layers)
	}
	return nil
}

// waitJob waits until block job id, if there is one, is gone.
func waitJob(ctx context.Context, q *qmp, id string) error {
	for delay := 250 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		var jobs []struct {
			Device string `json:"device"`
		}
		if err := q.Execute(ctx, "query-block-jobs", nil, &jobs); err != nil {
			return err
		}
		running := false
		for _, j := range jobs {
			running = running || j.Device == id
		}
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("block job %s still running: %w", id, ctx.Err())
		case <-time.After(delay):
		}
	}
}
