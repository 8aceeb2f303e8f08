package bench

// cove bench --backend qemu|gvisor runs the benchmarks against a
// temporary daemon of this same binary, with its own state directory and
// key, stopped and removed at the end.

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
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/runtime/gvisor"
	"github.com/cove-sandbox/cove/internal/runtime/qemu"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Daemon is a `cove serve` started for one run.
type Daemon struct {
	URL string // where it listens
	Key string // its API key

	backend string
	dir     string // everything it has, removed by Stop
	args    []string
	cmd     *exec.Cmd
	exited  chan error // cmd's end
	log     *os.File
	logf    func(string, ...any)
}

// DaemonConfig says what daemon Start starts.
type DaemonConfig struct {
	Backend  string   // qemu or gvisor
	Accel    string   // QEMU's accelerator (tcg, kvm or auto)
	ImageDir string   // where it finds images (with VM artifacts, for QEMU)
	Args     []string // more flags of cove serve
}

// Start starts a daemon (this executable's serve) of cfg's backend, on a
// free local port, with its own state under a new temporary directory,
// and waits until it answers. It logs to log; Stop it.
func Start(ctx context.Context, cfg DaemonConfig, log io.Writer) (*Daemon, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("--backend starts a daemon of its own, which needs root")
	}
	if cfg.Backend != "qemu" && cfg.Backend != "gvisor" {
		return nil, fmt.Errorf("backend %q: want qemu or gvisor", cfg.Backend)
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
	d := &Daemon{backend: cfg.Backend, dir: dir, logf: func(format string, args ...any) { fmt.Fprintf(log, "bench: "+format+"\n", args...) }}
	addr, err := freePort()
	if err == nil {
		d.URL = "http://" + addr
		d.log, err = os.Create(d.logPath())
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.args = []string{self, "serve", "--backend", cfg.Backend, "--addr", addr,
		"--state-dir", d.stateDir(), "--api-key-file", d.tokenPath(), "--image-dir", cfg.ImageDir,
		"--default-snapshot=", "--pool-size", "0"}
	if cfg.Backend == "qemu" {
		d.args = append(d.args, "--accel", cfg.Accel, "--start-timeout", "3m")
	}
	d.args = append(d.args, cfg.Args...)
	if err := d.start(); err != nil {
		d.log.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	d.logf("temporary daemon (%s) at %s, state in %s", strings.Join(d.args[2:4], " "), d.URL, dir)
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
// names the sandbox's directory (a VM's QEMU, a sandbox's runsc) is
// killed.
func (d *Daemon) KillSandbox(id string) int {
	return proc.KillMatching(proc.ArgsContain(filepath.Join(d.stateDir(), "sandboxes", id) + "/"))
}

// RunscRoot is the runsc --root of a gVisor daemon's sandboxes.
func (d *Daemon) RunscRoot() string { return gvisor.RootDir(d.sandboxDir()) }

func (d *Daemon) stateDir() string   { return filepath.Join(d.dir, "state") }
func (d *Daemon) sandboxDir() string { return filepath.Join(d.stateDir(), "sandboxes") } // cove serve's layout
func (d *Daemon) tokenPath() string  { return filepath.Join(d.dir, "token") }
func (d *Daemon) logPath() string    { return filepath.Join(d.dir, "serve.log") }

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
// deleted its sandboxes and snapshots by now, but one that survived
// (sandboxes outlive their daemon by design) is torn down here by the
// backend's runtime, with its network namespaces and cgroups, before the
// directory goes.
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
	d.destroyLeft(ctx)
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

// destroyLeft tears down the sandboxes left in the daemon's state
// directory.
func (d *Daemon) destroyLeft(ctx context.Context) {
	dir := d.sandboxDir()
	if _, err := os.Stat(dir); err != nil {
		return
	}
	quiet := slog.New(slog.DiscardHandler)
	var rt runtime.Runtime
	var err error
	if d.backend == "qemu" {
		rt, err = qemu.New(qemu.Config{Dir: dir, Logger: quiet})
	} else {
		rt, err = gvisor.New(gvisor.Config{Dir: dir, Logger: quiet})
	}
	if err != nil {
		d.logf("warning: sandboxes the temporary daemon left are not torn down: %v", err)
		return
	}
	defer rt.Close()
	ids, _ := rt.List(ctx)
	if len(ids) > 0 {
		d.logf("warning: tearing down %d sandboxes the temporary daemon left", len(ids))
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		if err := rt.Destroy(ctx, id); err != nil {
			d.logf("warning: %s: %v", id, err)
		}
		cancel()
	}
}
