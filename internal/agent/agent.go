// Package agent is the guest side of cove: it carries out the calls the
// daemon makes over agentproto inside a sandbox.
package agent

import (
	"context"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// Config configures an Agent. The zero value is the sandbox's configuration.
type Config struct {
	// WorkDir is where relative paths resolve and commands run by default.
	// It must be absolute; the default is agentproto.WorkDir. Tests point
	// it into a temporary directory.
	WorkDir string
	// Python is the interpreter behind Eval, looked up in the default PATH
	// unless it contains a slash; the default is "python3".
	Python string
	// Logger receives the agent's logs; the default discards them.
	Logger *slog.Logger
	// Hostname reports the name Ping returns; the default is os.Hostname.
	Hostname func() (string, error)
	// Cgroup, if set, is the cgroup directory every command (and the
	// interpreter) starts in, which bounds their processes; the agent
	// stays outside it. The default is the agent's own cgroup.
	Cgroup *os.File
	// ProcDir is where background processes keep their output rings; the
	// default is DefaultProcDir.
	ProcDir string
}

// Agent implements agentproto.Handler. It is safe for concurrent use.
type Agent struct {
	workDir  string
	python   string
	log      *slog.Logger
	hostname func() (string, error)
	cgroup   *os.File
	started  time.Time

	// evalSem serialises calls into the interpreter; a channel rather than
	// a mutex so that a queued call can give up when its context ends.
	evalSem chan struct{}

	mu     sync.Mutex
	py     *interp // the warm interpreter; nil until first needed
	closed bool
	// reseed is set by Restored: the interpreter reseeds its random
	// number generators before it runs more code.
	reseed bool

	// urandom is /dev/urandom open for writing, or nil: kept open so that
	// a clone's Restored does not run the path lookup and open anew.
	urandom *os.File

	procDir   string
	procsOnce sync.Once
	procs     *procTable // background processes; see procTable
}

var _ agentproto.Handler = (*Agent)(nil)

// New returns an Agent. It creates the work directory if it is missing.
func New(cfg Config) *Agent {
	a := &Agent{
		workDir:  cfg.WorkDir,
		python:   cfg.Python,
		log:      cfg.Logger,
		hostname: cfg.Hostname,
		cgroup:   cfg.Cgroup,
		started:  time.Now(),
		evalSem:  make(chan struct{}, 1),
		procDir:  cfg.ProcDir,
	}
	if a.workDir == "" {
		a.workDir = agentproto.WorkDir
	}
	a.workDir = filepath.Clean(a.workDir)
	if a.python == "" {
		a.python = "python3"
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.hostname == nil {
		a.hostname = os.Hostname
	}
	if f, err := openURandom(); err == nil {
		a.urandom = f
	}
	if err := os.MkdirAll(a.workDir, 0o755); err != nil {
		// Not fatal: file calls elsewhere still work, and Exec retries.
		a.log.Warn("cannot create work directory", "dir", a.workDir, "err", err)
	}
	return a
}

// Close stops the interpreter. Calls after Close fail.
func (a *Agent) Close() error {
	a.mu.Lock()
	p := a.py
	a.py = nil
	a.closed = true
	a.mu.Unlock()
	if p != nil {
		p.kill()
		<-p.exited
	}
	if a.urandom != nil {
		a.urandom.Close()
	}
	a.closeProcs()
	return nil
}

// Ping reports that the agent is alive.
func (a *Agent) Ping(ctx context.Context) (agentproto.PingResult, error) {
	host, err := a.hostname()
	if err != nil {
		a.log.Debug("hostname", "err", err)
	}
	return agentproto.PingResult{
		Version:      agentproto.Version,
		Hostname:     host,
		UptimeMs:     time.Since(a.started).Milliseconds(),
		TimeUnixNano: time.Now().UnixNano(),
	}, nil
}

// resolve is agentproto.ResolvePath with relative paths resolved against
// the agent's own work directory.
func (a *Agent) resolve(p string) (string, error) {
	abs, err := agentproto.ResolvePath(p) // refuses "", NUL and ".."
	if err != nil {
		return "", err
	}
	if !path.IsAbs(p) {
		abs = filepath.Join(a.workDir, p)
	}
	return abs, nil
}
