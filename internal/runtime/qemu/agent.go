package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/seriallink"
)

// Dial implements runtime.Runtime.
func (r *Runtime) Dial(ctx context.Context, id string) (net.Conn, error) {
	if !runtime.ValidID(id) {
		return nil, fmt.Errorf("qemu: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	if c := r.takeAgentConn(id); c != nil {
		return seriallink.Client(c)
	}
	if err := r.settle(ctx, id); err != nil {
		return nil, err
	}
	d := r.vmDir(id)
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", d.agentSock())
	if err == nil {
		return seriallink.Client(c)
	}
	// A guest that panicked ends its QEMU (-no-reboot): say so, with what
	// its console said last, rather than let the caller wait for it.
	if st, serr := d.readState(); serr == nil && st.Pid > 0 && !proc.Alive(st.Pid) {
		return nil, fmt.Errorf("qemu: sandbox %s: %w: console: %s", id, runtime.ErrExited, fsutil.Tail(d.consoleLog(), logTail))
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("qemu: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	return nil, fmt.Errorf("qemu: %w", err)
}

// connectAgent connects to a VM's agent socket before its snapshot is
// loaded and keeps the connection for the first Dial.
//
// Connected before the load, the host is there all along as far as the
// guest can tell: it was when the snapshot was taken (the daemon held a
// connection), so the load tells the guest of no hang-up, and the first
// reply waits for no reconnection. And a snapshot taken while the guest
// wrote to the host carries that write with it: QEMU flushes it as the
// clone resumes, and with nobody connected it would throttle the port for
// good (x-query-virtio-queue-status: the output queue stays "inuse"), so
// the guest's output would never reach the daemon. Connected, the stale
// write arrives here, of an old epoch, and seriallink's client skips it.
// The QMP round trip lets QEMU accept the connection: it takes one at a
// time, and one it has not accepted is not there for the load.
func (r *Runtime) connectAgent(ctx context.Context, q *qmp, id string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", r.vmDir(id).agentSock())
	if err != nil {
		return err
	}
	if err := q.Execute(ctx, "query-status", nil, nil); err != nil {
		c.Close()
		return err
	}
	r.mu.Lock()
	r.agentConns[id] = c // a VM is restored once: its directory is new
	r.mu.Unlock()
	return nil
}

// takeAgentConn returns the connection connectAgent kept for id, if any.
func (r *Runtime) takeAgentConn(id string) net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.agentConns[id]
	delete(r.agentConns, id)
	return c
}
