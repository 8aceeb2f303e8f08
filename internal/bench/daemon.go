package bench

// cove bench --backend qemu runs the benchmarks that apply to QEMU
// microVMs against a temporary daemon of this same binary, with its own
// state directory and key, stopped and removed at the end.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime/qemu"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Daemon is a `cove serve --backend qemu` started for one run.
type Daemon struct {
	URL string // where it listens
	Key string // its API key

	dir    string // everything it has, removed by Stop
	args   []string
	cmd    *exec.Cmd
	exited chan error // cmd's end
	log    *os.File
	logf   func(string, ...any)
}

// StartQEMU starts a QEMU daemon (this executable's serve) under
// accelerator accel, with images from imageDir, on a free local port, with
// its own state under a new temporary directory, and waits until it
// answers. It logs to log; Stop it.
func StartQEMU(ctx context.Context, accel, imageDir string, log io.Writer) (*Daemon, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("--backend qemu starts its own daemon, which needs root")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Short: the VMs' unix sockets live below it.
	dir, err := os.MkdirTemp("", "cove-bench-")
	if err != nil {
		return nil, err
	}
	d := &Daemon{dir: dir, logf: func(format string, args ...any) { fmt.Fprintf(log, "bench: "+format+"\n", args...) }}
	addr, err := freePort()
	if err == nil {
		d.URL = "http://" + addr
		d.log, err = os.Create(d.logPath())
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.args = []string{self, "serve", "--backend", "qemu", "--accel", accel, "--addr", addr,
		"--state-dir", d.stateDir(), "--api-key-file", d.tokenPath(), "--image-dir", imageDir,
		"--default-snapshot=", "--start-timeout", "3m", "--pool-size", "0"}
	if err := d.start(); err != nil {
		d.log.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	d.logf("temporary daemon (qemu, %s) at %s, state in %s", accel, d.URL, dir)
	if err := d.wait(ctx); err != nil {
		d.Stop(ctx)
		return nil, err
	}
	return d, nil
}

// start starts the daemon's process.
func (d *Daemon) start() error {
	d.cmd = exec.Command(d.args[0], d.args[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.cmd = nil
		return err
	}
	exited := make(chan error, 1)
	d.exited = exited
	go func(cmd *exec.Cmd) { exited <- cmd.Wait() }(d.cmd)
	return nil
}

// Restart implements Restarter: SIGKILL, as a crash; the sandboxes
// stay, as they do.
func (d *Daemon) Restart(ctx context.Context, whileDown func()) (time.Time, error) {
	if d.cmd == nil {
		return time.Time{}, errors.New("the temporary daemon is not running")
	}
	d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
	whileDown()
	t0 := time.Now()
	if err := d.start(); err != nil {
		return t0, fmt.Errorf("restart the temporary daemon: %w", err)
	}
	return t0, nil
}

// KillSandbox implements Restarter: every process whose command line
// names the sandbox's directory (a VM's QEMU) is killed.
func (d *Daemon) KillSandbox(id string) int {
	return proc.KillMatching(proc.ArgsContain(filepath.Join(d.stateDir(), "sandboxes", id) + "/"))
}

func (d *Daemon) stateDir() string  { return filepath.Join(d.dir, "state") }
func (d *Daemon) tokenPath() string { return filepath.Join(d.dir, "token") }
func (d *Daemon) logPath() string   { return filepath.Join(d.dir, "serve.log") }

// freePort returns a local address no one listens on, for now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// wait waits until the daemon has written its key and answers with it.
func (d *Daemon) wait(ctx context.Context) error {
	const timeout = 2 * time.Minute
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(d.tokenPath()); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			d.Key = strings.TrimSpace(string(b))
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := client.New(d.URL, d.Key).Info(ictx)
			cancel()
			if err == nil {
				return nil
			}
		}
		select {
		case err := <-d.exited:
			d.cmd = nil
			return fmt.Errorf("temporary daemon exited (%v): %s", err, fsutil.Tail(d.logPath(), 800))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporary daemon did not answer within %s: %s", timeout, fsutil.Tail(d.logPath(), 800))
		}
	}
}

// Stop stops the daemon and removes everything it left: the bench has
// deleted its sandboxes and snapshots by now, but a VM that survived
// (QEMU outlives its daemon by design) is torn down here by the QEMU
// runtime, with its network namespace and cgroups, before the directory
// goes.
func (d *Daemon) Stop(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if d.cmd != nil && d.cmd.Process != nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		for i := 0; i < 600 && proc.Alive(d.cmd.Process.Pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if proc.Alive(d.cmd.Process.Pid) {
			d.cmd.Process.Kill()
		}
	}
	d.destroyVMs(ctx)
	if n := proc.KillMatching(proc.ArgsContain(d.dir + "/")); n > 0 {
		d.logf("warning: killed %d processes the temporary daemon left", n)
	}
	if d.log != nil {
		d.log.Close()
	}
	if err := os.RemoveAll(d.dir); err != nil {
		d.logf("warning: %v", err)
	}
}

// destroyVMs tears down the VMs left in the daemon's state directory.
func (d *Daemon) destroyVMs(ctx context.Context) {
	dir := filepath.Join(d.stateDir(), "sandboxes") // cove serve's layout
	if _, err := os.Stat(dir); err != nil {
		return
	}
	rt, err := qemu.New(qemu.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		d.logf("warning: VMs the temporary daemon left are not torn down: %v", err)
		return
	}
	defer rt.Close()
	ids, _ := rt.List(ctx)
	if len(ids) > 0 {
		d.logf("warning: tearing down %d VMs the temporary daemon left", len(ids))
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		if err := rt.Destroy(ctx, id); err != nil {
			d.logf("warning: %s: %v", id, err)
		}
		cancel()
	}
}
