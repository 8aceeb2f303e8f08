package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// SmokeTimeout bounds a smoke boot: a cold boot under TCG takes 6-7 s on
// an idle host, many times that on a busy one.
const SmokeTimeout = 3 * time.Minute

// SmokeBoot cold-boots a throwaway VM from files, as the daemon would
// (its own state directory, netns and cgroup, QEMU as cfg.User under
// -sandbox), and returns once its agent answers a ping; the VM is gone
// when it returns. An image build runs it on VM artifacts before they are
// published, so a kernel, initrd or agent that cannot boot is an error of
// the build rather than of every sandbox after it. cfg.Dir is ignored;
// cfg.Accel "" picks KVM where a probe guest boots, else TCG; cfg.User ""
// is cove-qemu when that user exists.
func SmokeBoot(ctx context.Context, cfg Config, files runtime.ImageFiles) (err error) {
	ctx, cancel := context.WithTimeout(ctx, SmokeTimeout)
	defer cancel()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Accel == "" {
		cfg.Accel = "tcg"
		if ProbeKVM(ctx, cfg.Qemu, files) == nil {
			cfg.Accel = "kvm"
		}
	}
	if cfg.User == "" {
		if _, err := user.Lookup("cove-qemu"); err == nil {
			cfg.User = "cove-qemu"
		}
	}
	tmp, err := os.MkdirTemp("", "cove-smoke-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.Dir = filepath.Join(tmp, "vms")
	r, err := New(cfg)
	if err != nil {
		return err
	}
	id := "smoke-" + randhex.New(6)
	spec := runtime.Spec{ID: id, ImageFiles: files, CPUs: 1, MemoryMiB: 256, Hostname: "smoke"}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer dcancel()
		if derr := r.Destroy(dctx, id); derr != nil {
			err = errors.Join(err, fmt.Errorf("smoke boot: tear down: %w", derr))
		}
	}()
	t0 := time.Now()
	if err := r.Start(ctx, spec); err != nil {
		return fmt.Errorf("smoke boot (%s): start: %w", cfg.Accel, err)
	}
	if err := pingAgent(ctx, r, id); err != nil {
		return fmt.Errorf("smoke boot (%s): the agent did not answer within %s: %w; console: %s",
			cfg.Accel, time.Since(t0).Round(time.Second), err, fsutil.Tail(r.vmDir(id).consoleLog(), logTail))
	}
	r.log.Info("smoke boot: the agent answered", "accel", cfg.Accel, "took", time.Since(t0))
	return nil
}

// pingAgent dials the VM's agent until a ping answers, ctx ends, or the
// guest is gone.
func pingAgent(ctx context.Context, r *Runtime, id string) error {
	var last error
	for {
		conn, err := r.Dial(ctx, id)
		if errors.Is(err, runtime.ErrExited) {
			return err
		}
		if err == nil {
			var c *agentproto.Client
			if c, err = agentproto.NewClient(conn); err == nil {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = c.Ping(pctx)
				pcancel()
				c.Close()
				if err == nil {
					return nil
				}
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
