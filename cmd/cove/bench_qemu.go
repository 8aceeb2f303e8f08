package main

// cove bench --backend qemu: the benchmarks that apply to QEMU microVMs,
// run against a temporary daemon of this same binary, with its own state
// directory and key, stopped and removed at the end.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// accelOf names QEMU's accelerator from what the daemon says about its
// backend ("" for other backends).
func accelOf(info apitype.Info) string {
	if info.Backend != "qemu" {
		return ""
	}
	// The runtime version ends in "(tcg)" or "(kvm)"; the reason names
	// TCG whenever it was chosen.
	for _, s := range []string{info.RuntimeVer, info.BackendReason} {
		switch l := strings.ToLower(s); {
		case strings.Contains(l, "(tcg)"), strings.Contains(l, "--accel tcg"), strings.Contains(l, "tcg because"):
			return "tcg"
		case strings.Contains(l, "(kvm)"), strings.Contains(l, "kvm probe guest booted"):
			return "kvm"
		}
	}
	return "unknown"
}

// restoreRatio is how many times faster a restore from a snapshot is than
// a cold boot, from the create and spawn rows of one run.
func restoreRatio(rows []benchResult) (benchResult, bool) {
	i := slices.IndexFunc(rows, func(r benchResult) bool { return r.Name == "create" && r.Error == "" })
	j := slices.IndexFunc(rows, func(r benchResult) bool { return r.Name == "spawn" && r.Error == "" })
	if i < 0 || j < 0 || rows[j].P50 <= 0 {
		return benchResult{}, false
	}
	x := round3(rows[i].P50 / rows[j].P50)
	return benchResult{Name: "cold_vs_restore", Unit: unitRatio, P50: x, P99: x, N: 1}, true
}

// qemuBenchDefaults turns the benchmarks that do not apply to a fresh
// QEMU daemon (or take too long under TCG) off, unless asked for, and
// spawns 10 and 50 children rather than 100.
func qemuBenchDefaults(fs *flag.FlagSet, o *benchOpts) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["file-mib"] {
		o.fileMiB = 0
	}
	if !set["chain-samples"] {
		o.chainSamples = 0
	}
	if !set["baseline-execs"] {
		o.baselineExecs = 0
	}
	if !set["spawn-n"] && o.spawnN > 0 {
		o.spawnNs = []int{10, 50}
		o.spawnN = 50
	}
	// Clones under TCG take longer to go quiet.
	o.pssSettle = 5 * time.Second
}

// tempDaemon is a `cove serve --backend qemu` started for one bench run.
type tempDaemon struct {
	dir string
	url string
	key string
	cmd *exec.Cmd
	log *os.File
}

// startTempDaemon starts a QEMU daemon on a free local port with its own
// state under a new temporary directory and waits until it answers.
func startTempDaemon(ctx context.Context, accel, imageDir string, logf func(string, ...any)) (*tempDaemon, error) {
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	d := &tempDaemon{dir: dir, url: "http://" + addr}
	d.log, err = os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	d.cmd = exec.Command(self, "serve", "--backend", "qemu", "--accel", accel, "--addr", addr,
		"--state-dir", filepath.Join(dir, "state"), "--token-file", tokenFile, "--image-dir", imageDir,
		"--default-snapshot=", "--start-timeout", "3m", "--pool-size", "0")
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.log.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	logf("temporary daemon (qemu, %s) at %s, state in %s", accel, d.url, dir)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if b, err := os.ReadFile(tokenFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			d.key = strings.TrimSpace(string(b))
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := client.New(d.url, d.key).Info(ictx)
			cancel()
			if err == nil {
				go func() { <-exited }()
				return d, nil
			}
		}
		select {
		case err := <-exited:
			tail := tailOf(filepath.Join(dir, "serve.log"))
			d.cmd = nil
			d.stop(logf)
			return nil, fmt.Errorf("temporary daemon exited (%v): %s", err, tail)
		case <-ctx.Done():
			d.stop(logf)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop(logf)
			return nil, fmt.Errorf("temporary daemon did not answer within 2m: %s", tailOf(filepath.Join(dir, "serve.log")))
		}
	}
}

// stop stops the daemon and removes everything it left: the bench has
// deleted its sandboxes and snapshots by now, but a VM that survived
// (QEMU outlives its daemon by design) is killed here, with its network
// namespace, before the directory goes.
func (d *tempDaemon) stop(logf func(string, ...any)) {
	if d.cmd != nil && d.cmd.Process != nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		for i := 0; i < 600 && processAlive(d.cmd.Process.Pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if processAlive(d.cmd.Process.Pid) {
			d.cmd.Process.Kill()
		}
	}
	vms, _ := os.ReadDir(filepath.Join(d.dir, "state", "sandboxes"))
	if n := killNaming(d.dir + "/"); n > 0 {
		logf("warning: killed %d QEMU processes the temporary daemon left", n)
	}
	for _, vm := range vms {
		ns := "cove-" + vm.Name() + "-v"
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			exec.CommandContext(ctx, "ip", "netns", "delete", ns).Run()
			cancel()
		}
		os.Remove(filepath.Join("/sys/fs/cgroup/cpu/cove", vm.Name()))
		os.Remove(filepath.Join("/sys/fs/cgroup/memory/cove", vm.Name()))
		os.Remove(filepath.Join("/sys/fs/cgroup/cove", vm.Name()))
	}
	if d.log != nil {
		d.log.Close()
	}
	if err := os.RemoveAll(d.dir); err != nil {
		logf("warning: %v", err)
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// killNaming SIGKILLs every process whose command line contains s.
func killNaming(s string) int {
	procs, _ := os.ReadDir("/proc")
	n := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) && processAlive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

func tailOf(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return strings.TrimSpace(string(b))
}
