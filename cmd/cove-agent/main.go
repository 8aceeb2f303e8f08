// Command cove-agent runs inside every cove sandbox and carries out the
// daemon's calls (see internal/agentproto). It serves them on TCP, or with
// --serial on a virtio-serial port (see internal/seriallink).
//
// It usually runs as PID 1. Then it is a tiny init: it re-executes itself
// as a child that does the work, reaps every orphan, forwards SIGTERM and
// SIGINT to the child, and exits with the child's status.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/cove-sandbox/cove/internal/agent"
	"github.com/cove-sandbox/cove/internal/agentproto"
)

// version is set at link time: -ldflags "-X main.version=..."
var version = "dev"

// childEnv marks the child that init starts. An environment variable
// rather than a flag keeps it out of -help; the child unsets it at once so
// that nothing it runs inherits it.
const childEnv = "COVE_AGENT_CHILD"

func main() {
	listen := flag.String("listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(agentproto.Port)), "TCP address to listen on")
	serial := flag.String("serial", "", "serve on the virtio-serial port with this `name` instead of TCP")
	logLevel := flag.String("log-level", "info", "log level: debug, info, warn or error")
	warmEval := flag.Bool("warm-eval", false, "start the Python interpreter at startup rather than on the first eval")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "cove-agent: --log-level: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if os.Getpid() == 1 && os.Getenv(childEnv) == "" {
		os.Exit(runInit(log.With("role", "init")))
	}
	os.Unsetenv(childEnv)
	if err := run(log, *listen, *serial, *warmEval); err != nil {
		log.Error("cove-agent failed", "err", err)
		os.Exit(1)
	}
}

// run serves the daemon until SIGTERM or SIGINT, on the virtio-serial port
// named serial if it is set, else on TCP address listen.
func run(log *slog.Logger, listen, serial string, warmEval bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := clearInheritable(); err != nil {
		log.Warn("clear inheritable capabilities", "err", err)
	}
	var cgroup *os.File
	if serial != "" { // a VM's agent: its bounds are the agent's to apply
		cgroup = applyVMLimits(log)
	}
	a := agent.New(agent.Config{Logger: log, Cgroup: cgroup})
	defer a.Close()
	if warmEval {
		go func() {
			if err := a.Warm(ctx); err != nil {
				log.Warn("warm python interpreter", "err", err)
			}
		}()
	}

	var (
		l    net.Listener
		addr string
		err  error
	)
	if serial != "" {
		l, addr, err = listenSerial(ctx, serial)
	} else {
		l, err = net.Listen("tcp", listen)
		if err == nil {
			addr = l.Addr().String()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the port
		}
		return err
	}
	log.Info("cove-agent listening", "addr", addr, "version", version, "protocol", agentproto.Version, "pid", os.Getpid())
	err = agentproto.Serve(ctx, l, a, log)
	if ctx.Err() != nil {
		log.Info("cove-agent stopping")
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}
