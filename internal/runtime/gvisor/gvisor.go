// Package gvisor runs sandboxes under gVisor's runsc: a user-space kernel
// that needs no hardware virtualisation.
package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/mount"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// Config configures the runtime.
type Config struct {
	Runsc string // path to runsc; default "runsc" in PATH
	// Dir holds one directory per sandbox (bundle, overlay, logs) and
	// runsc's own state under Dir/.runsc.
	Dir    string
	Logger *slog.Logger
}

// Runtime is the gVisor backend.
type Runtime struct {
	runsc string
	dir   string
	root  string // runsc --root
	log   *slog.Logger
	// found are the processes on runsc's root that New saw running: an
	// earlier daemon's sandboxes and gofers. Destroy kills a sandbox's
	// among them, which covers one that runsc had forked but not yet
	// recorded or put in its cgroup when that daemon died.
	found *strays
}

var _ runtime.Runtime = (*Runtime)(nil)

// callTimeout bounds every runsc invocation: a wedged runsc must not wedge
// the daemon.
const callTimeout = 30 * time.Second

// errWedged is a runsc launch that did not finish within callTimeout.
var errWedged = errors.New("runsc did not finish in time")

// New checks that runsc is usable and prepares the state directories.
func New(cfg Config) (*Runtime, error) {
	runsc := cfg.Runsc
	if runsc == "" {
		runsc = "runsc"
	}
	path, err := exec.LookPath(runsc)
	if err != nil {
		return nil, fmt.Errorf("gvisor: runsc not found (%w): run scripts/install-deps.sh or pass --runsc", err)
	}
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("gvisor: state dir %q must be absolute", cfg.Dir)
	}
	r := &Runtime{runsc: path, dir: cfg.Dir, root: RootDir(cfg.Dir), log: cfg.Logger, found: newStrays()}
	if r.log == nil {
		r.log = slog.Default()
	}
	if err := os.MkdirAll(r.root, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	if err := r.killStrayCommands(); err != nil {
		return nil, err
	}
	// The host's processes are read once here, not at every Destroy.
	r.found.scan(r.root)
	return r, nil
}

// killStrayCommands kills the runsc commands running on this runtime's
// root. They are an earlier daemon's, killed mid-call: runsc runs in a
// session of its own and outlives it. Left alone, a checkpoint or restore
// goes on writing what the next daemon's recovery cleans up. Sandboxes and
// their gofers (runsc re-executed under another name) are left running.
func (r *Runtime) killStrayCommands() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	n, err := proc.KillAllMatching(ctx, func(args []string) bool {
		return len(args) > 0 && (args[0] == r.runsc || filepath.Base(args[0]) == "runsc") && containsArg(args, r.root)
	})
	if n > 0 {
		r.log.Info("killed runsc commands an earlier daemon left running", "n", n)
	}
	if err != nil {
		return fmt.Errorf("gvisor: kill an earlier daemon's runsc commands: %w", err)
	}
	return nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

// Version implements runtime.Runtime.
func (r *Runtime) Version(ctx context.Context) string {
	out, err := r.runscCmd(ctx, "--version")
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func (r *Runtime) sandboxDir(id string) string { return filepath.Join(r.dir, id) }

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	return r.launch(ctx, spec, "run", "--detach")
}

// Restore implements runtime.Runtime: a new sandbox, with its own
// namespaces and overlay, from a checkpoint made by Checkpoint.
// A restore that wedges (seen once in CI, on a loaded machine, with
// nothing in runsc's log) is cleaned up and tried once more.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, image string) error {
	err := r.launch(ctx, spec, "restore", "--detach", "--image-path", image)
	if errors.Is(err, errWedged) && ctx.Err() == nil {
		r.log.Warn("runsc restore wedged; trying once more", "id", spec.ID, "err", err)
		err = r.launch(ctx, spec, "restore", "--detach", "--image-path", image)
	}
	return err
}

// launch prepares a sandbox's directory, namespaces and bundle, then runs
// runsc with the given subcommand.
func (r *Runtime) launch(ctx context.Context, spec runtime.Spec, subcmd ...string) (err error) {
	if !runtime.ValidID(spec.ID) {
		return fmt.Errorf("gvisor: invalid sandbox id %q", spec.ID)
	}
	dir := r.sandboxDir(spec.ID)
	// The directory comes first: it is what List finds, so a crash at any
	// later step still leaves something the next daemon will reap.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer func() {
		if err != nil {
			// Clean up with a fresh context: ctx may be what failed.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			defer cancel()
			// A launch cut short may have left a process runsc had not
			// yet recorded: the host's processes are searched too.
			if derr := r.destroy(cctx, spec.ID, true); derr != nil {
				r.log.Warn("cleanup after failed start", "id", spec.ID, "err", derr)
			}
		}
	}()
	if err := setupNetns(ctx, spec.ID); err != nil {
		return fmt.Errorf("gvisor: network: %w", err)
	}
	bundle := filepath.Join(dir, "bundle")
	overlay := filepath.Join(dir, "overlay")
	for _, d := range []string{bundle, overlay} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("gvisor: %w", err)
		}
	}
	b, err := json.MarshalIndent(ociSpec(spec), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	console, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer console.Close()

	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	args := append(r.globalFlags(spec.ID), limitFlags(spec, overlay)...)
	// The pid file names the sandbox process for Wait and Destroy, which
	// then need no runsc call of their own.
	args = append(append(args, subcmd...), "--bundle", bundle, "--pid-file", r.pidFile(spec.ID), spec.ID)
	cmd := exec.CommandContext(ctx, r.runsc, args...)
	// The sandbox inherits these as the agent's stdout and stderr and
	// outlives this call; runsc's own errors are in the log file.
	cmd.Stdout, cmd.Stderr = console, console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%v)", errWedged, err)
		}
		return fmt.Errorf("gvisor: runsc %s: %w: %s", subcmd[0], err, r.tail(spec.ID))
	}
	return nil
}

// Checkpoint implements runtime.Runtime. runsc pauses the sandbox for the
// whole write; the returned duration is the runsc call's wall time, an
// upper bound on that pause.
func (r *Runtime) Checkpoint(ctx context.Context, id, image string, leaveRunning bool) (time.Duration, error) {
	if !runtime.ValidID(id) {
		return 0, runtime.ErrNotFound
	}
	if err := os.MkdirAll(image, 0o700); err != nil {
		return 0, fmt.Errorf("gvisor: %w", err)
	}
	args := append(r.globalFlags(id), "checkpoint", "--image-path", image)
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	// The save runs in the sandbox's cgroup, whose quota the sandbox
	// itself may be using up: throttled, the checkpoint (and the pause
	// of a branch's source) takes longer. One CPU more meanwhile.
	if restore, err := cgroup.RaiseCPUQuota(cgroup.Dirs(id)...); err == nil {
		defer restore()
	}
	t0 := time.Now()
	out, err := r.runscCmd(ctx, append(args, id)...)
	pause := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("gvisor: runsc checkpoint: %w: %s", err, bytes.TrimSpace(out))
	}
	return pause, nil
}

// globalFlags are the runsc flags every call for a sandbox shares.
func (r *Runtime) globalFlags(id string) []string {
	return []string{
		"--root", r.root,
		"--platform", "systrap",
		"--network", "sandbox",
		"--log", filepath.Join(r.sandboxDir(id), "runsc.log"),
		"--cpu-num-from-quota",
		// The image's user has passwordless sudo, which is set-user-ID:
		// gVisor ignores that bit unless told. It elevates to the
		// sandbox's own root, which every call may run as anyway.
		"--allow-suid",
	}
}

// tail returns the end of a sandbox's runsc log, for error messages.
func (r *Runtime) tail(id string) string {
	return fsutil.Tail(filepath.Join(r.sandboxDir(id), "runsc.log"), 600)
}

// Dial implements runtime.Runtime.
func (r *Runtime) Dial(ctx context.Context, id string) (net.Conn, error) {
	if !runtime.ValidID(id) {
		return nil, runtime.ErrNotFound
	}
	ns := r.Netns(id)
	if !netns.Exists(ns) {
		return nil, fmt.Errorf("gvisor: sandbox %s: %w", id, runtime.ErrNotFound)
	}
	return netns.Dial(ctx, ns, net.JoinHostPort(netns.GuestIP, strconv.Itoa(agentproto.Port)))
}

// Destroy implements runtime.Runtime. It runs no runsc or ip(8): the
// sandbox's processes are those in its cgroup and those runsc recorded,
// killed directly, and what runsc delete would remove is removed here.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	return r.destroy(ctx, id, false)
}

// destroy is Destroy; scan also searches every host process for the
// sandbox's, for a launch cut short whose processes nothing recorded.
func (r *Runtime) destroy(ctx context.Context, id string, scan bool) error {
	if !runtime.ValidID(id) {
		return nil
	}
	var errs []error
	if err := r.killProcs(ctx, id, scan); err != nil {
		errs = append(errs, err)
	}
	// The sandbox was just killed: its cgroups' tasks may still be
	// exiting, which cgroup.Remove waits out. (A rmdir tried once left a
	// sandbox's cgroups behind after a daemon's restart.)
	if err := cgroup.Remove(cgroup.Dirs(id)...); err != nil {
		errs = append(errs, err)
	}
	if err := teardownNetns(ctx, id); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range []string{r.sandboxDir(id), filepath.Join(r.root, id)} {
		if err := removeTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	// What runsc delete removes: a new sandbox under the id could not
	// make its socket while they are there.
	for _, f := range r.rootFiles(id) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killProcs kills every process of sandbox id and waits for them to exit:
// those runsc recorded (its sandbox and gofer), those New found, and every
// process in the sandbox's cgroups, where runsc starts both and the
// sandbox's stubs live. With scan, every host process whose command line
// names the sandbox too.
func (r *Runtime) killProcs(ctx context.Context, id string, scan bool) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	mine := func(args []string) bool { return containsArg(args, r.root) && containsID(args, id) }
	pids := append(r.recordedPids(id), r.found.take(id)...)
	if _, err := proc.KillWait(ctx, pids, func(pid int) bool {
		args, err := proc.Cmdline(pid)
		return err == nil && mine(args)
	}); err != nil {
		return fmt.Errorf("gvisor: kill the processes of %s: %w", id, err)
	}
	if _, err := cgroup.Kill(ctx, cgroup.Dirs(id)...); err != nil {
		return fmt.Errorf("gvisor: kill the processes of %s: %w", id, err)
	}
	if !scan {
		return nil
	}
	if _, err := proc.KillAllMatching(ctx, mine); err != nil {
		return fmt.Errorf("gvisor: kill the processes of %s: %w", id, err)
	}
	return nil
}

// rootFiles are the files runsc keeps for sandbox id in its root: its
// control socket, and its container's state and lock.
func (r *Runtime) rootFiles(id string) []string {
	files := []string{filepath.Join(r.root, "runsc-"+id+".sock")}
	for _, ext := range []string{".state", ".lock"} {
		files = append(files, filepath.Join(r.root, id+"_sandbox:"+id+ext))
	}
	return files
}

// List implements runtime.Runtime.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && runtime.ValidID(e.Name()) && !seen[e.Name()] {
			seen[e.Name()] = true
			ids = append(ids, e.Name())
		}
	}
	// runsc state without a directory: a sandbox whose directory was lost.
	if ents, err := os.ReadDir(r.root); err == nil {
		for _, e := range ents {
			// A container's state is "<sandbox>_sandbox:<container>.state".
			id, _, _ := strings.Cut(strings.TrimSuffix(e.Name(), ".state"), "_sandbox:")
			if runtime.ValidID(id) && id != nullNetns && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// nullNetns is a namespace mount runsc keeps in its root for all sandboxes.
const nullNetns = "null-netns"

// Close releases what the runtime holds beyond its sandboxes, which keep
// running so that the next daemon can re-attach to them.
func (r *Runtime) Close() error {
	return mount.UnmountUnder(filepath.Join(r.root, nullNetns))
}

func (r *Runtime) runscCmd(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.runsc, args...)
	cmd.WaitDelay = time.Second
	return cmd.CombinedOutput()
}

// containsArg and containsID match the command line of a sandbox's
// processes: runsc's root as an argument or a flag's value, and the
// sandbox's id as an argument or a path's component.
func containsArg(args []string, s string) bool {
	for _, a := range args {
		if a == s || strings.HasSuffix(a, "="+s) {
			return true
		}
	}
	return false
}

func containsID(args []string, id string) bool {
	for _, a := range args {
		if a == id || strings.Contains(a, "/"+id+"/") || strings.HasSuffix(a, "/"+id) {
			return true
		}
	}
	return false
}
