package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// layerName is the file of layer i of a VM's qcow2 chain. Each new layer
// takes the number after the highest in its chain, so names are unique
// within a chain (a flattened chain skips numbers) and hard links of a
// whole chain never collide.
func layerName(i int) string { return fmt.Sprintf("disk-%d.qcow2", i) }

// layerIndex is the number in a layerName.
func layerIndex(name string) int {
	var i int
	fmt.Sscanf(name, "disk-%d.qcow2", &i)
	return i
}

// nextLayer is the number of the layer to stack on a chain.
func nextLayer(layers []string) int {
	n := 0
	for _, l := range layers {
		n = max(n, layerIndex(l)+1)
	}
	return n
}

// nodeName is the block node of layer i: "root" for the first.
func nodeName(i int) string {
	if i == 0 {
		return "root"
	}
	return "root" + strconv.Itoa(i)
}

func activeNode(st *vmState) string { return nodeName(layerIndex(st.Layers[len(st.Layers)-1])) }

// qemuImgCreate makes path a qcow2 overlay of backing, whose format is
// backingFmt, of the given virtual size.
func (r *Runtime) qemuImgCreate(ctx context.Context, path, backing, backingFmt string, size int64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// -u: the size is known, so qemu-img need not open the whole chain.
	cmd := exec.CommandContext(ctx, r.qemuImg, "create", "-q", "-u", "-f", "qcow2", "-F", backingFmt,
		"-b", backing, "-o", "lazy_refcounts=on", path, strconv.FormatInt(size, 10))
	cmd.Dir = filepath.Dir(path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return r.chown(path)
}

// newTopLayer makes path an empty qcow2 overlay of top (a bare name in
// the same directory): a copy of the snapshot's template when it has one.
func (r *Runtime) newTopLayer(ctx context.Context, snap snapDir, path, top string, size int64) error {
	if err := copyFile(snap.overlay(), path); err == nil {
		return r.chown(path)
	}
	os.Remove(path)
	return r.qemuImgCreate(ctx, path, top, "qcow2", size)
}

// openNextLayer makes the layer a branch stacks on the VM's chain, and
// opens it as a block node, both before the pause: at the switch-over
// stacking it is then one graph change, not a file to open and probe. It
// is backed by the active layer through a relative name, so a later
// snapshot's hard links of the whole chain resolve within the snapshot
// directory.
func (r *Runtime) openNextLayer(ctx context.Context, q *qmp, st *vmState) (name, node string, err error) {
	name, node = layerName(nextLayer(st.Layers)), nodeName(nextLayer(st.Layers))
	path := r.vmDir(st.ID).layer(name)
	os.Remove(path)
	if err := r.qemuImgCreate(ctx, path, st.Layers[len(st.Layers)-1], "qcow2", st.DiskSize); err != nil {
		return "", "", err
	}
	cache, file := diskCache()
	file["driver"], file["filename"] = "file", path
	if err := q.Execute(ctx, "blockdev-add", map[string]any{
		"driver": "qcow2", "node-name": node, "backing": nil, "cache": cache, "file": file,
	}, nil); err != nil {
		return "", "", fmt.Errorf("open the next overlay: %w", err)
	}
	return name, node, nil
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

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
	var blocks []blockInfo
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
		if err := dir.writeState(*st); err != nil {
			return err
		}
		// Every layer is a node the runtime named, unused now but open
		// until deleted: from the top down, as each backs the next.
		for i := len(middle) - 1; i >= 0; i-- {
			l := middle[i]
			if err := q.Execute(ctx, "blockdev-del", map[string]any{"node-name": nodeName(layerIndex(l))}, nil); err != nil {
				return err
			}
			if err := os.Remove(dir.layer(l)); err != nil && !errors.Is(err, os.ErrNotExist) {
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
