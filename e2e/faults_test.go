package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// The fault tests' one leak check: after a fault (a daemon SIGKILLed
// mid-operation and restarted, a disk that ran full), what the daemon
// lists is all there is. Every snapshot, checkpoint, template and sandbox
// in the API has its row and its files; every row, state directory and
// saved image has something listed that owns it; and no backend process
// (runsc sandbox or gofer, a runsc checkpoint, QEMU), mount, network
// namespace, cgroup or RAM file belongs to a sandbox that is not running.

// leakCheck says what a check may ignore: things the test made itself
// under the state directory (a small file system mounted over a part of
// it, the files that fill it).
type leakCheck struct {
	mounts []string // mount points
	files  []string // paths
}

// waitNoLeaks polls until d holds nothing its API does not list, and fails
// the test with what it still holds after a while: a restarted daemon's
// recovery (templates' last), and a teardown, finish a moment after the
// API answers.
func waitNoLeaks(t *testing.T, d *daemon, lc leakCheck) {
	t.Helper()
	var problems []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if problems = leaks(t, d, lc); len(problems) == 0 {
			return
		}
	}
	t.Fatalf("the daemon holds what it does not list:\n  %s\ndaemon log:\n%s", strings.Join(problems, "\n  "), d.logTail())
}

// stateView is what a daemon lists and what its store holds.
type stateView struct {
	running, listed map[string]bool // sandbox ids: running ones, and all listed
	paused          map[string]bool
	snaps           map[string]bool // listed snapshot tags
	templates       map[string]bool
	rows            []store.Snapshot
	ckpts           map[string][]store.Checkpoint
	sbRows          []store.Sandbox
	tmplRows        []store.Template
}

func viewOf(t *testing.T, d *daemon) (stateView, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := stateView{running: map[string]bool{}, listed: map[string]bool{}, paused: map[string]bool{},
		snaps: map[string]bool{}, templates: map[string]bool{}}
	sbs, err := d.c.ListSandboxes(ctx)
	if err != nil {
		return v, err
	}
	for _, sb := range sbs {
		v.listed[sb.ID] = true
		switch sb.Status {
		case apitype.StatusPaused:
			v.paused[sb.ID] = true
		case apitype.StatusDead:
		default: // running, or pausing/resuming in flight: it may hold anything
			v.running[sb.ID] = true
		}
	}
	sns, err := d.c.ListSnapshots(ctx)
	if err != nil {
		return v, err
	}
	for _, sn := range sns {
		v.snaps[sn.Tag] = true
	}
	tis, err := d.c.ListTemplates(ctx)
	if err != nil {
		return v, err
	}
	for _, ti := range tis {
		v.templates[ti.Name] = true
	}
	// The daemon's own store, opened beside it (SQLite in WAL mode).
	st, err := store.Open(ctx, filepath.Join(d.stateDir(), "cove.db"))
	if err != nil {
		return v, err
	}
	defer st.Close()
	if v.rows, err = st.Snapshots(ctx); err != nil {
		return v, err
	}
	if v.ckpts, err = st.Checkpoints(ctx); err != nil {
		return v, err
	}
	if v.sbRows, err = st.Sandboxes(ctx); err != nil {
		return v, err
	}
	v.tmplRows, err = st.Templates(ctx)
	return v, err
}

// leaks lists what d holds that nothing it lists owns.
func leaks(t *testing.T, d *daemon, lc leakCheck) []string {
	t.Helper()
	v, err := viewOf(t, d)
	if err != nil {
		return []string{fmt.Sprintf("cannot list the daemon's state: %v", err)}
	}
	out := v.storeLeaks(d.stateDir(), lc)
	out = append(out, v.diskLeaks(d.stateDir(), lc)...)
	return append(out, v.hostLeaks(d.stateDir(), lc)...)
}

// hiddenOwned reports whether tag is a template's step cache (or a build
// under way: a restarted daemon has none) of a template that exists.
func (v stateView) hiddenOwned(tag string) bool {
	name, _, ok := strings.Cut(tag, ".step-")
	return ok && v.templates[name]
}

// storeLeaks: rows the API does not list, and listed things without rows.
func (v stateView) storeLeaks(state string, lc leakCheck) []string {
	var out []string
	rowTags := map[string]bool{}
	for _, r := range v.rows {
		rowTags[r.Tag] = true
		switch {
		case r.Pending:
			out = append(out, "a pending snapshot row (a branch that never answered): "+r.Tag)
		case !v.snaps[r.Tag] && !v.hiddenOwned(r.Tag):
			out = append(out, "a snapshot row nothing lists: "+r.Tag)
		}
		if _, err := os.Stat(filepath.Join(state, "snapshots", r.Tag)); err != nil {
			out = append(out, "a snapshot row without its files: "+r.Tag)
		}
	}
	for tag := range v.snaps {
		if !rowTags[tag] {
			out = append(out, "a listed snapshot without a row: "+tag)
		}
	}
	for id, cs := range v.ckpts {
		for _, c := range cs {
			if !v.listed[id] {
				out = append(out, fmt.Sprintf("a checkpoint row of a sandbox nothing lists: %s/%s", id, c.Name))
			}
			if _, err := os.Stat(filepath.Join(state, "checkpoints", id, c.Name)); err != nil {
				out = append(out, fmt.Sprintf("a checkpoint row without its files: %s/%s", id, c.Name))
			}
		}
	}
	for _, r := range v.sbRows {
		if !v.listed[r.ID] {
			out = append(out, fmt.Sprintf("a sandbox row nothing lists: %s (%s)", r.ID, r.Status))
		}
	}
	for _, r := range v.tmplRows {
		if !v.templates[r.Name] {
			out = append(out, "a template row nothing lists: "+r.Name)
		}
		if !rowTags[r.Name] {
			out = append(out, "a template without its snapshot: "+r.Name)
		}
	}
	return out
}

// diskLeaks: entries of the state directory's saved state that no listed
// snapshot, checkpoint, paused or running sandbox owns; half-written
// (.tmp-) ones among them.
func (v stateView) diskLeaks(state string, lc leakCheck) []string {
	var out []string
	entries := func(dir string) []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			if !slices.Contains(lc.files, filepath.Join(dir, e.Name())) {
				names = append(names, e.Name())
			}
		}
		return names
	}
	rowTags := map[string]bool{}
	for _, r := range v.rows {
		rowTags[r.Tag] = true
	}
	for _, n := range entries(filepath.Join(state, "snapshots")) {
		if !rowTags[n] || (!v.snaps[n] && !v.hiddenOwned(n)) {
			out = append(out, "snapshots/"+n)
		}
	}
	for _, n := range entries(filepath.Join(state, "paused")) {
		if !v.paused[n] {
			out = append(out, "paused/"+n)
		}
	}
	for _, id := range entries(filepath.Join(state, "checkpoints")) {
		names := map[string]bool{}
		for _, c := range v.ckpts[id] {
			names[c.Name] = true
		}
		for _, n := range entries(filepath.Join(state, "checkpoints", id)) {
			if !names[n] || !v.listed[id] {
				out = append(out, "checkpoints/"+id+"/"+n)
			}
		}
	}
	for _, n := range entries(filepath.Join(state, "sandboxes")) {
		if !strings.HasPrefix(n, ".") && !v.running[n] {
			out = append(out, "sandboxes/"+n)
		}
	}
	for _, n := range entries(state) {
		if strings.Contains(n, ".tmp-") {
			out = append(out, n)
		}
	}
	return out
}

var anyID = regexp.MustCompile(`sb-[0-9a-f]{12}`)

// hostLeaks: processes, mounts, namespaces, cgroups and RAM files of
// sandboxes that are not running.
func (v stateView) hostLeaks(state string, lc leakCheck) []string {
	var out []string
	owned := func(s string) bool {
		ids := anyID.FindAllString(s, -1)
		return len(ids) > 0 && slices.ContainsFunc(ids, func(id string) bool { return v.running[id] })
	}
	for pid, args := range backendProcs(state) {
		if cmdline := strings.Join(args, " "); !owned(cmdline) {
			out = append(out, fmt.Sprintf("process %s: %s", pid, cmdline))
		}
	}
	for _, m := range sandboxMounts(state) {
		if f := strings.Fields(m); len(f) > 4 && slices.Contains(lc.mounts, f[4]) {
			continue
		}
		if !owned(m) {
			out = append(out, "mount: "+m)
		}
	}
	// Namespaces and cgroups are named by sandbox id alone: those of
	// sandboxes this daemon started count, whatever else runs.
	started := daemonIDs(state)
	gone := func(id string) bool { return started[id] && !v.running[id] }
	ns, _ := os.ReadDir("/var/run/netns")
	for _, e := range ns {
		if isBackendNetns(e.Name()) && gone(netnsID(e.Name())) {
			out = append(out, "netns "+e.Name())
		}
	}
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/cove/sb-*")
	v2, _ := filepath.Glob("/sys/fs/cgroup/cove/sb-*")
	for _, cg := range append(v1, v2...) {
		if gone(filepath.Base(cg)) {
			out = append(out, "cgroup "+cg)
		}
	}
	h := sha256.Sum256([]byte(filepath.Join(state, "sandboxes")))
	shm, _ := filepath.Glob(fmt.Sprintf("/dev/shm/cove-%x-*.mem", h[:4]))
	for _, f := range shm {
		if !owned(f) {
			out = append(out, "RAM file "+f)
		}
	}
	return out
}

// killWhen SIGKILLs d as soon as at reports that the operation under way
// has reached the point to kill it at, and returns the operation's status
// (0: none came). It fails the test if the operation answered first: then
// it was not killed midway.
func killWhen(t *testing.T, d *daemon, what string, at func() bool, done <-chan int) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Minute); !at(); time.Sleep(2 * time.Millisecond) {
		select {
		case status := <-done:
			t.Fatalf("%s answered %d before it reached the point to kill it at\n%s", what, status, d.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach the point to kill it at\n%s", what, d.logTail())
		}
	}
	d.kill9()
	return <-done
}

// writing reports whether dir holds a save being written (a .tmp- entry).
func writing(dir string) func() bool {
	return func() bool {
		ents, _ := os.ReadDir(dir)
		return slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.Contains(e.Name(), ".tmp-") })
	}
}
