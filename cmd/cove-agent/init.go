package main

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// runInit is PID 1: it runs the agent as its child and reaps every process
// orphaned into it, which is every background process a command leaves.
// It returns the child's exit status.
func runInit(log *slog.Logger) int {
	exe, err := os.Executable()
	if err != nil {
		log.Error("find own executable", "err", err)
		return 1
	}
	// Subscribe before starting the child so no SIGCHLD is missed. The
	// other signals whose default would end a Go program are caught and
	// dropped: a stray `kill -HUP 1` must not take the sandbox down. (Not
	// signal.Ignore: an ignored signal stays ignored across exec, in every
	// command the agent runs.)
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT,
		syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)

	// No asynchronous preemption in the agent (the commands it runs get
	// an environment of their own): its goroutines block on I/O, and under
	// TCG, where a goroutine runs long, sysmon's preemption signals cost
	// each clone a round of signal-delivery code to translate.
	child, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), childEnv+"=1", "GODEBUG=asyncpreemptoff=1"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		log.Error("start agent", "err", err)
		return 1
	}
	pid := child.Pid
	// The child is reaped by wait4(-1) below like any orphan, never through
	// child.Wait.
	child.Release()

	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			if ws, done := reap(pid); done {
				code := exitCode(ws)
				log.Info("agent exited", "status", code)
				return code
			}
		case syscall.SIGTERM, syscall.SIGINT:
			log.Info("forwarding signal", "signal", sig)
			if err := syscall.Kill(pid, sig.(syscall.Signal)); err != nil {
				log.Warn("forward signal", "signal", sig, "err", err)
			}
		default:
			log.Debug("ignoring signal", "signal", sig)
		}
	}
	return 1 // not reached: sigs is never closed
}

// reap collects every exited child. Signals coalesce, so one SIGCHLD may
// stand for many. It reports whether the agent child was among them.
func reap(agentPid int) (status syscall.WaitStatus, agentDone bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return status, agentDone
		}
		if pid == agentPid {
			status, agentDone = ws, true
		}
	}
}

// exitCode is the status a shell would report for ws.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
