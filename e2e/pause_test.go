package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/proc"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// counterPy prints an incrementing counter held in the process's memory.
const counterPy = "import time\ni = 0\nwhile True:\n    i += 1\n    print(i, flush=True)\n    time.sleep(0.2)\n"

// sandboxPss sums the Pss (KiB) of the host's backend processes whose
// command line names the sandbox id, and says how many there are.
func sandboxPss(t *testing.T, id string) (kib int64, procs int) {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(id)) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if !isBackendProc(args) {
			continue
		}
		rollup, err := os.ReadFile(filepath.Join("/proc", e.Name(), "smaps_rollup"))
		if err != nil {
			continue // gone
		}
		for line := range strings.Lines(string(rollup)) {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				if f := strings.Fields(v); len(f) == 2 {
					n, _ := strconv.ParseInt(f[0], 10, 64)
					kib += n
				}
			}
		}
		procs++
	}
	return kib, procs
}

// counted returns the numbers a counter printed, failing unless they run
// 1, 2, 3, ... without a gap or a restart.
func counted(t *testing.T, out string) []int {
	t.Helper()
	var ns []int
	for _, f := range strings.Fields(out) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("counter wrote %q", f)
		}
		if n != len(ns)+1 {
			t.Fatalf("counter went %v then %d: it restarted or lost its memory", ns[max(0, len(ns)-3):], n)
		}
		ns = append(ns, n)
	}
	return ns
}

// awaitCount waits until the counter's output passes n, and returns its last number.
func awaitCount(t *testing.T, c *client.Client, sb sandbox, ref string, n int) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, exit := procOutput(t, c, sb, ref)
		if ns := counted(t, out); len(ns) > n {
			return ns[len(ns)-1]
		}
		if exit != nil || time.Now().After(deadline) {
			t.Fatalf("counter %s did not pass %d (exit %+v): %q", ref, n, exit, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func wantCode(t *testing.T, err error, status int, what string) {
	t.Helper()
	var he *client.Error
	if !errors.As(err, &he) || he.Status != status {
		t.Fatalf("%s: error %v, want HTTP %d", what, err, status)
	}
}

func pauseOK(t *testing.T, d *daemon, id string) apitype.SandboxInfo {
	t.Helper()
	info, err := d.c.PauseSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("pause %s: %v\n%s", id, err, d.logTail())
	}
	if info.Status != apitype.StatusPaused || info.PausedAtUnix == 0 || info.PausedBytes <= 0 || info.DiskBytes < info.PausedBytes {
		t.Fatalf("paused: %+v", info)
	}
	return info
}

func resumeOK(t *testing.T, d *daemon, id string) apitype.SandboxInfo {
	t.Helper()
	info, err := d.c.ResumeSandbox(context.Background(), id, 0)
	if err != nil {
		t.Fatalf("resume %s: %v\n%s", id, err, d.logTail())
	}
	if info.Status != apitype.StatusRunning {
		t.Fatalf("resumed: %+v", info)
	}
	return info
}

// TestPauseResume: a sandbox with a counter running in memory, a Python
// variable and a file is paused: its backend processes are gone and their
// memory with them, its saved state on disk. Resumed, the counter goes on
// from where it stood, the variable and the file are there, the id, token
// and hostname the same; and the same again across a daemon SIGKILL
// between the pause and the resume.
func TestPauseResume(t *testing.T) {
	d, err := startDaemon(filepath.Join(suite.tmp, "pause"))
	if err != nil {
		t.Fatal(err)
	}
	base := countResources(t, d.stateDir())
	defer func() {
		d.stop()
		waitResources(t, d.stateDir(), base)
	}()
	ctx := context.Background()
	sb := create(t, d, apitype.CreateSandboxRequest{TTLSecs: 1800, Labels: map[string]string{"k": "v"}})[0]
	execOK(t, d, sb, "echo kept > /work/keep.txt")
	evalOK(t, d, sb, "x = 41")
	p := startProc(t, d, sb, apitype.ExecRequest{Args: []string{"python3", "-u", "-c", counterPy}, Tag: "counter"})
	ref := strconv.Itoa(p.Pid)
	last := awaitCount(t, d.c, sb, ref, 3)

	for _, round := range []string{"resume", "resume after a daemon SIGKILL"} {
		before, procs := sandboxPss(t, sb.id)
		if procs == 0 || before <= 0 {
			t.Fatalf("%s: the running sandbox has %d backend processes, Pss %d KiB", round, procs, before)
		}
		info := pauseOK(t, d, sb.id)
		after, procs := sandboxPss(t, sb.id)
		t.Logf("%s: Pss %d KiB running, %d KiB (%d processes) paused; %d bytes on disk", round, before, after, procs, info.PausedBytes)
		if procs != 0 || after != 0 {
			t.Fatalf("%s: paused, the sandbox still has %d backend processes holding %d KiB", round, procs, after)
		}
		if _, err := os.Stat(filepath.Join(d.stateDir(), "paused", sb.id)); err != nil {
			t.Fatalf("%s: no saved state: %v", round, err)
		}
		// Nothing of it is left on the host but its saved state: no
		// directory, namespace, cgroup, mount or RAM file.
		if r := countResources(t, d.stateDir()); r != base {
			t.Fatalf("%s: paused, the host holds %+v, want %+v as before the sandbox", round, r, base)
		}
		_, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: "true"})
		wantCode(t, err, 409, round+": exec in a paused sandbox")
		if !strings.Contains(err.Error(), "paused: resume it") {
			t.Fatalf("%s: exec in a paused sandbox: %v", round, err)
		}
		if round != "resume" {
			d.kill9()
			if err := d.start(); err != nil {
				t.Fatal(err)
			}
			got, err := d.c.GetSandbox(ctx, sb.id)
			if err != nil || got.Status != apitype.StatusPaused {
				t.Fatalf("after a SIGKILL: %+v, %v", got, err)
			}
		}
		r := resumeOK(t, d, sb.id)
		if r.ID != sb.id || r.Labels["k"] != "v" {
			t.Fatalf("%s: %+v", round, r)
		}
		if _, err := os.Stat(filepath.Join(d.stateDir(), "paused", sb.id)); !os.IsNotExist(err) {
			t.Fatalf("%s: saved state left after the resume: %v", round, err)
		}
		if got := execOK(t, d, sb, "cat /work/keep.txt; hostname"); got != "kept\n"+sb.id+"\n" {
			t.Fatalf("%s: file and hostname read %q", round, got)
		}
		if got := evalOK(t, d, sb, "x"); got != "41" {
			t.Fatalf("%s: x = %s, want 41", round, got)
		}
		// counted fails on a restart; the counter must also get past
		// where it stood.
		last = awaitCount(t, d.c, sb, ref, last+2)
	}
}

// TestPausedLifecycle: a paused sandbox's lifetime stands still (it
// outlives its TTL while paused and has what was left after the resume);
// deleting a paused sandbox removes its files; auto_resume resumes it on
// a data-plane call; on_expiry=pause pauses it at its expiry.
func TestPausedLifecycle(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	t.Run("TTLStandsStill", func(t *testing.T) {
		sb := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: suite.base, TTLSecs: 6})[0]
		defer d.c.DeleteSandbox(ctx, sb.id)
		info := pauseOK(t, d, sb.id)
		time.Sleep(8 * time.Second) // past its TTL
		got, err := d.c.GetSandbox(ctx, sb.id)
		if err != nil || got.Status != apitype.StatusPaused || got.RemainingTTLSecs != info.RemainingTTLSecs {
			t.Fatalf("paused past its TTL: %+v, %v (paused with %+v)", got, err, info)
		}
		r := resumeOK(t, d, sb.id)
		if left := time.Until(time.Unix(r.ExpiresAtUnix, 0)); left < 2*time.Second {
			t.Fatalf("resumed with %s left, want what it had at the pause (%d s)", left, info.RemainingTTLSecs)
		}
		execOK(t, d, sb, "true")
	})
	t.Run("DeleteRemovesFiles", func(t *testing.T) {
		sb := newSandbox(t)
		if _, err := d.c.Checkpoint(ctx, sb.id, sb.token, "one"); err != nil {
			t.Fatal(err)
		}
		info := pauseOK(t, d, sb.id)
		if info.CheckpointBytes <= 0 || info.DiskBytes != info.PausedBytes+info.CheckpointBytes {
			t.Fatalf("disk use: %+v", info)
		}
		if err := d.c.DeleteSandbox(ctx, sb.id); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{"paused", "checkpoints"} {
			if _, err := os.Stat(filepath.Join(d.stateDir(), dir, sb.id)); !os.IsNotExist(err) {
				t.Errorf("%s/%s left after delete: %v", dir, sb.id, err)
			}
		}
		_, err := d.c.GetSandbox(ctx, sb.id)
		wantCode(t, err, 404, "get a deleted paused sandbox")
	})
	t.Run("AutoResume", func(t *testing.T) {
		sb := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: suite.base, AutoResume: true})[0]
		defer d.c.DeleteSandbox(ctx, sb.id)
		execOK(t, d, sb, "echo a > /work/a")
		pauseOK(t, d, sb.id)
		if got := execOK(t, d, sb, "cat /work/a"); got != "a\n" {
			t.Fatalf("auto-resumed sandbox reads %q", got)
		}
		if got, _ := d.c.GetSandbox(ctx, sb.id); got.Status != apitype.StatusRunning {
			t.Fatalf("after a call: %+v", got)
		}
		// A request to an exposed port's preview URL resumes it too.
		marker := serveMarker(t, d, sb, 8000)
		pi, err := d.c.ExposePort(ctx, sb.id, sb.token, 8000, true)
		if err != nil {
			t.Fatal(err)
		}
		pauseOK(t, d, sb.id)
		if resp, body := previewGet(t, previewClient(d, nil), pi.URL, nil); resp.StatusCode != 200 || !strings.Contains(body, marker) {
			t.Fatalf("preview of a paused auto_resume sandbox: %d %q", resp.StatusCode, body)
		}
		if got, _ := d.c.GetSandbox(ctx, sb.id); got.Status != apitype.StatusRunning {
			t.Fatalf("after a preview request: %+v", got)
		}
	})
	t.Run("OnExpiryPause", func(t *testing.T) {
		_, err := d.c.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: suite.base, OnExpiry: "sleep"})
		wantCode(t, err, 400, "on_expiry sleep")
		sb := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: suite.base, TTLSecs: 3, OnExpiry: apitype.OnExpiryPause})[0]
		defer d.c.DeleteSandbox(ctx, sb.id)
		execOK(t, d, sb, "echo e > /work/e")
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			got, err := d.c.GetSandbox(ctx, sb.id)
			if err != nil {
				t.Fatalf("at its expiry: %v", err)
			}
			if got.Status == apitype.StatusPaused {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not paused at its expiry: %+v", got)
			}
		}
		resumeOK(t, d, sb.id)
		if got := execOK(t, d, sb, "cat /work/e"); got != "e\n" {
			t.Fatalf("resumed after expiry reads %q", got)
		}
	})
}

// TestCheckpointRollback: a sandbox checkpointed, then changed (a file
// deleted, a process killed, a Python variable changed), rolled back has
// the file, the process and the old value again under the same id and
// token; a second rollback to the same checkpoint does too. Bad input is
// refused and changes nothing.
func TestCheckpointRollback(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	sb := newSandbox(t)
	execOK(t, d, sb, "echo precious > /work/f")
	evalOK(t, d, sb, "v = 'old'")
	p := startProc(t, d, sb, apitype.ExecRequest{Args: []string{"python3", "-u", "-c", counterPy}, Tag: "counter"})
	ref := strconv.Itoa(p.Pid)
	awaitCount(t, d.c, sb, ref, 2)
	c, err := d.c.Checkpoint(ctx, sb.id, sb.token, "before")
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, d.logTail())
	}
	if c.Name != "before" || c.SizeBytes <= 0 || c.CreatedAtUnix == 0 {
		t.Fatalf("checkpoint: %+v", c)
	}
	t.Logf("checkpoint: %d bytes, sandbox stood still %d ms", c.SizeBytes, c.PauseMs)

	_, err = d.c.Checkpoint(ctx, sb.id, sb.token, "before")
	wantCode(t, err, 409, "a second checkpoint named before")
	_, err = d.c.Checkpoint(ctx, sb.id, sb.token, "../up")
	wantCode(t, err, 400, "checkpoint ../up")
	_, err = d.c.Rollback(ctx, sb.id, sb.token, "nope")
	wantCode(t, err, 404, "rollback to nope")
	_, err = d.c.Rollback(ctx, sb.id, "wrong-token", "before")
	wantCode(t, err, 403, "rollback with a wrong token")

	for round := range 2 {
		execOK(t, d, sb, "rm /work/f")
		evalOK(t, d, sb, "v = 'new'")
		if _, err := d.c.Signal(ctx, sb.id, sb.token, ref, "KILL"); err != nil {
			t.Fatal(err)
		}
		info, err := d.c.Rollback(ctx, sb.id, sb.token, "before")
		if err != nil {
			t.Fatalf("rollback %d: %v\n%s", round, err, d.logTail())
		}
		if info.ID != sb.id || info.Status != apitype.StatusRunning {
			t.Fatalf("rollback %d: %+v", round, info)
		}
		if got := execOK(t, d, sb, "cat /work/f"); got != "precious\n" {
			t.Fatalf("rollback %d: the file reads %q", round, got)
		}
		if got := evalOK(t, d, sb, "v"); got != "'old'" {
			t.Fatalf("rollback %d: v = %s", round, got)
		}
		pi, err := d.c.Process(ctx, sb.id, sb.token, ref)
		if err != nil || pi.Status != apitype.ProcessRunning {
			t.Fatalf("rollback %d: the counter is %+v, %v", round, pi, err)
		}
		awaitCount(t, d.c, sb, ref, 4)
	}
	list, err := d.c.Checkpoints(ctx, sb.id, sb.token)
	if err != nil || len(list) != 1 || list[0].Name != "before" {
		t.Fatalf("checkpoints: %+v, %v", list, err)
	}
	pauseOK(t, d, sb.id)
	_, err = d.c.Rollback(ctx, sb.id, sb.token, "before")
	wantCode(t, err, 409, "rollback of a paused sandbox")
}

// TestPauseCLI: cove create --auto-resume --on-expiry, cove pause, resume,
// checkpoint, checkpoints (table and --json) and rollback.
func TestPauseCLI(t *testing.T) {
	d := suite.shared
	home := t.TempDir()
	id := strings.TrimSpace(coveCLI(t, d, home, "create", "-q", "--snapshot", suite.base, "--on-expiry", "pause"))
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), id) })
	if got, _ := d.c.GetSandbox(context.Background(), id); got.OnExpiry != apitype.OnExpiryPause || got.AutoResume {
		t.Fatalf("cove create --on-expiry pause made %+v", got)
	}
	coveCLI(t, d, home, "exec", id, "--", "sh", "-c", "echo one > /work/n")
	if out := coveCLI(t, d, home, "checkpoint", id, "first"); !strings.HasPrefix(out, "first\t") {
		t.Fatalf("cove checkpoint: %q", out)
	}
	if out := coveCLI(t, d, home, "checkpoints", id); !strings.Contains(out, "NAME") || !strings.Contains(out, "first") {
		t.Fatalf("cove checkpoints:\n%s", out)
	}
	if out := coveCLI(t, d, home, "checkpoints", id, "--json"); !strings.Contains(out, `"name": "first"`) {
		t.Fatalf("cove checkpoints --json:\n%s", out)
	}
	coveCLI(t, d, home, "exec", id, "--", "sh", "-c", "echo two > /work/n")
	coveCLI(t, d, home, "rollback", id, "first")
	if out := coveCLI(t, d, home, "exec", id, "--", "cat", "/work/n"); out != "one\n" {
		t.Fatalf("after cove rollback: %q", out)
	}
	if out := coveCLI(t, d, home, "pause", id); !strings.Contains(out, id+" paused") {
		t.Fatalf("cove pause: %q", out)
	}
	if out := coveCLI(t, d, home, "ls"); !strings.Contains(out, "paused") {
		t.Fatalf("cove ls of a paused sandbox:\n%s", out)
	}
	if out := coveCLI(t, d, home, "resume", id, "--ttl", "10m"); !strings.Contains(out, id+" resumed") {
		t.Fatalf("cove resume: %q", out)
	}
	if out := coveCLI(t, d, home, "exec", id, "--", "cat", "/work/n"); out != "one\n" {
		t.Fatalf("after cove resume: %q", out)
	}
}

// TestPauseMCP: an agent checkpoints, breaks and rolls back its sandbox,
// and pauses and resumes it, through the daemon's /mcp.
func TestPauseMCP(t *testing.T) {
	d := suite.shared
	cs := connectMCP(t, httpTransport(d.url, d.key))
	var sb struct{ ID, Token string }
	callOK(t, cs, "create_sandbox", map[string]any{"snapshot_tag": suite.base, "auto_resume": true}, &sb)
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), sb.ID) })
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": sb.ID, "code": "state = 'good'"}, nil)
	var c struct {
		Name      string
		SizeBytes int64 `json:"size_bytes"`
	}
	callOK(t, cs, "checkpoint_sandbox", map[string]any{"sandbox_id": sb.ID, "name": "good"}, &c)
	if c.Name != "good" || c.SizeBytes <= 0 {
		t.Fatalf("checkpoint_sandbox: %+v", c)
	}
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": sb.ID, "code": "state = 'broken'"}, nil)
	callOK(t, cs, "rollback_sandbox", map[string]any{"sandbox_id": sb.ID, "checkpoint": "good"}, nil)
	var ev struct{ Result string }
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": sb.ID, "code": "state"}, &ev)
	if ev.Result != "'good'" {
		t.Fatalf("after rollback_sandbox: state = %s", ev.Result)
	}
	var st struct{ Status string }
	callOK(t, cs, "pause_sandbox", map[string]any{"sandbox_id": sb.ID}, &st)
	if st.Status != apitype.StatusPaused {
		t.Fatalf("pause_sandbox: %+v", st)
	}
	// auto_resume: the next call resumes it.
	callOK(t, cs, "eval_code", map[string]any{"sandbox_id": sb.ID, "code": "state"}, &ev)
	if ev.Result != "'good'" {
		t.Fatalf("after an auto-resume: state = %s", ev.Result)
	}
	callOK(t, cs, "pause_sandbox", map[string]any{"sandbox_id": sb.ID}, nil)
	callOK(t, cs, "resume_sandbox", map[string]any{"sandbox_id": sb.ID}, &st)
	if st.Status != apitype.StatusRunning {
		t.Fatalf("resume_sandbox: %+v", st)
	}
	if msg := callErr(t, cs, "rollback_sandbox", map[string]any{"sandbox_id": sb.ID, "checkpoint": "nope"}); !strings.Contains(msg, "nope") {
		t.Fatalf("rollback_sandbox to nope: %q", msg)
	}
}

// TestPauseKilledMidway kills the daemon with SIGKILL while a pause and a
// checkpoint write the sandbox's state, and while a rollback and a resume
// are under way, and restarts it: the sandbox is then running, paused or
// dead, never stuck in between; nothing half-written is left, nor anything
// of a sandbox that is not running (waitNoLeaks); and once it is deleted
// the host holds nothing of it.
func TestPauseKilledMidway(t *testing.T) {
	d, err := startDaemon(filepath.Join(suite.tmp, "pause-killed"))
	if err != nil {
		t.Fatal(err)
	}
	base := countResources(t, d.stateDir())
	defer func() {
		d.stop()
		waitResources(t, d.stateDir(), base)
		for _, dir := range []string{"paused", "checkpoints"} {
			if ents, _ := os.ReadDir(filepath.Join(d.stateDir(), dir)); len(ents) != 0 {
				t.Errorf("%s/ holds %d entries after every sandbox was deleted", dir, len(ents))
			}
		}
	}()
	ctx := context.Background()
	fresh := func() sandbox {
		sb := create(t, d, apitype.CreateSandboxRequest{})[0]
		if _, err := d.c.Checkpoint(ctx, sb.id, sb.token, "base"); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	sb := fresh()
	ops := []struct{ name, path, body string }{
		{"pause", "/pause", ""},
		{"resume", "/resume", ""},
		{"checkpoint", "/checkpoints", `{"name":"mid"}`},
		{"rollback", "/rollback", `{"checkpoint":"base"}`},
	}
	for i, op := range ops {
		got, err := d.c.GetSandbox(ctx, sb.id)
		if err != nil {
			t.Fatalf("before the %s: %v", op.name, err)
		}
		if got.Status == apitype.StatusDead { // at the last kill: carry on with another
			d.c.DeleteSandbox(ctx, sb.id)
			sb = fresh()
			got.Status = apitype.StatusRunning
		}
		switch {
		case op.name == "resume" && got.Status != apitype.StatusPaused:
			pauseOK(t, d, sb.id)
		case op.name != "resume" && got.Status == apitype.StatusPaused:
			resumeOK(t, d, sb.id)
		}
		done := make(chan int, 1)
		go func() { done <- postQuietly(d, "/v1/sandboxes/"+sb.id+op.path, sb.token, op.body) }()
		var status int
		switch op.name {
		case "pause": // while its state is being written
			status = killWhen(t, d, op.name, writing(filepath.Join(d.stateDir(), "paused")), done)
		case "checkpoint":
			status = killWhen(t, d, op.name, writing(filepath.Join(d.stateDir(), "checkpoints", sb.id)), done)
		default:
			// Somewhere inside the operation: its runtime call takes longer.
			time.Sleep(time.Duration(20+40*i) * time.Millisecond)
			d.kill9()
			status = <-done
		}
		t.Logf("%s: killed the daemon; the call answered %d", op.name, status)
		if err := d.start(); err != nil {
			t.Fatal(err)
		}
		got, err = d.c.GetSandbox(ctx, sb.id)
		if err != nil {
			t.Fatalf("after a kill mid-%s: %v", op.name, err)
		}
		t.Logf("%s: after the restart the sandbox is %s", op.name, got.Status)
		switch got.Status {
		case apitype.StatusRunning:
			execOK(t, d, sb, "true")
		case apitype.StatusPaused:
			resumeOK(t, d, sb.id)
			execOK(t, d, sb, "true")
		case apitype.StatusDead:
		default:
			t.Fatalf("after a kill mid-%s the sandbox is %q", op.name, got.Status)
		}
		// No half pause or checkpoint, nothing of a sandbox that is not
		// running, on disk, in the store or on the host.
		waitNoLeaks(t, d, leakCheck{})
	}
}

// TestPauseKilledMidResume kills the daemon while its runtime is restoring
// a paused sandbox, at points from the restore process's start to well
// into it. The killed daemon's restore lives on as an orphan; the next
// daemon must settle it, whatever stage it reached, so that the sandbox is
// either running or paused and resumable.
func TestPauseKilledMidResume(t *testing.T) {
	d := ownDaemon(t, "pause-killed-resume")
	ctx := context.Background()
	sb := create(t, d, apitype.CreateSandboxRequest{})[0]
	for _, after := range []time.Duration{0, 5, 15, 30, 60, 100, 150} {
		after *= time.Millisecond
		if got, _ := d.c.GetSandbox(ctx, sb.id); got.Status != apitype.StatusPaused {
			pauseOK(t, d, sb.id)
		}
		done := make(chan int, 1)
		go func() { done <- postQuietly(d, "/v1/sandboxes/"+sb.id+"/resume", sb.token, "") }()
		begun := func() bool {
			if len(restoring(sb.id)) == 0 {
				return false
			}
			time.Sleep(after)
			return true
		}
		status := killWhen(t, d, "resume", begun, done)
		t.Logf("killed %v after the restore began; the call answered %d", after, status)
		if err := d.start(); err != nil {
			t.Fatal(err)
		}
		got, err := d.c.GetSandbox(ctx, sb.id)
		if err != nil {
			t.Fatalf("after a kill mid-resume: %v", err)
		}
		switch got.Status {
		case apitype.StatusRunning:
		case apitype.StatusPaused:
			resumeOK(t, d, sb.id)
		default:
			t.Fatalf("killed %v into a resume, the sandbox is %q, want paused or running", after, got.Status)
		}
		execOK(t, d, sb, "true")
	}
	d.c.DeleteSandbox(ctx, sb.id)
	waitNoLeaks(t, d, leakCheck{})
}

// restoring returns the pids of the runtime processes restoring sandbox id:
// a runsc restore, or a QEMU waiting for or loading its incoming state.
func restoring(id string) []int {
	return proc.Find(func(args []string) bool {
		var isID, isRestore bool
		for _, a := range args {
			isID = isID || a == id || strings.Contains(a, id)
			isRestore = isRestore || a == "restore" || a == "-incoming"
		}
		return isID && isRestore
	})
}
