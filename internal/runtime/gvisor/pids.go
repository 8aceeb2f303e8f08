package gvisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/internal/proc"
)

// pidFile is where runsc run and restore write sandbox id's sandbox pid.
func (r *Runtime) pidFile(id string) string { return filepath.Join(r.sandboxDir(id), "sandbox.pid") }

// readPidFile returns the pid in sandbox id's pid file, or 0 if there is
// none yet (runsc writes it last) or the sandbox predates pid files.
func (r *Runtime) readPidFile(id string) int {
	b, err := os.ReadFile(r.pidFile(id))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// stateFile is runsc's record of sandbox id's container, in its root.
func (r *Runtime) stateFile(id string) string {
	return filepath.Join(r.root, id+"_sandbox:"+id+".state")
}

// recordedPids returns the pids runsc recorded for sandbox id: its
// sandbox process, from the pid file or runsc's state, and its gofer's,
// from runsc's state. Either may be missing (a launch cut short), stale or
// reused: callers check a pid's command line before they signal it.
func (r *Runtime) recordedPids(id string) []int {
	var pids []int
	if pid := r.readPidFile(id); pid > 0 {
		pids = append(pids, pid)
	}
	b, err := os.ReadFile(r.stateFile(id))
	if err != nil {
		return pids
	}
	var st struct {
		GoferPid int `json:"goferPid"`
		Sandbox  *struct {
			Pid int `json:"pid"`
		} `json:"sandbox"`
	}
	if json.Unmarshal(b, &st) != nil {
		return pids
	}
	if st.GoferPid > 0 {
		pids = append(pids, st.GoferPid)
	}
	if st.Sandbox != nil && st.Sandbox.Pid > 0 {
		pids = append(pids, st.Sandbox.Pid)
	}
	return pids
}

// strays are processes on a runsc root seen by one look at the host's
// processes, by pid with their command lines, until taken.
type strays struct {
	mu    sync.Mutex
	procs map[int][]string
}

func newStrays() *strays { return &strays{procs: map[int][]string{}} }

// scan records the processes whose command line names runsc root root.
func (s *strays) scan(root string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range proc.Find(func(args []string) bool { return containsArg(args, root) }) {
		if args, err := proc.Cmdline(pid); err == nil {
			s.procs[pid] = args
		}
	}
}

// take removes and returns the recorded processes whose command line
// names sandbox id.
func (s *strays) take(id string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pids []int
	for pid, args := range s.procs {
		if containsID(args, id) {
			pids = append(pids, pid)
			delete(s.procs, pid)
		}
	}
	return pids
}
