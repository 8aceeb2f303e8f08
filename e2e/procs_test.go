package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// startProc starts a background process or fails the test.
func startProc(t *testing.T, d *daemon, sb sandbox, req apitype.ExecRequest) apitype.ProcessInfo {
	t.Helper()
	p, err := d.c.StartProcess(context.Background(), sb.id, sb.token, req)
	if err != nil {
		t.Fatalf("start %+v: %v", req, err)
	}
	if p.Pid <= 0 || p.Status != apitype.ProcessRunning {
		t.Fatalf("started %+v", p)
	}
	return p
}

// procOutput reads a process's whole output so far, by offset, a page at a
// time.
func procOutput(t *testing.T, c *client.Client, sb sandbox, ref string) (string, *apitype.ExitStatus) {
	t.Helper()
	var b strings.Builder
	var off int64
	for {
		po, err := c.ProcessOutput(context.Background(), sb.id, sb.token, ref, off, 64<<10)
		if err != nil {
			t.Fatalf("output of %s from %d: %v", ref, off, err)
		}
		for _, ch := range po.Chunks {
			b.Write(ch.Bytes())
		}
		if po.NextOffset == off {
			return b.String(), po.Exit
		}
		off = po.NextOffset
	}
}

// awaitOutput polls a process's output until it contains text.
func awaitOutput(t *testing.T, c *client.Client, sb sandbox, ref, text string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, exit := procOutput(t, c, sb, ref)
		if strings.Contains(out, text) {
			return out
		}
		if exit != nil || time.Now().After(deadline) {
			t.Fatalf("process %s never wrote %q (exit %+v); it wrote %q", ref, text, exit, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestProcessServer: a background http.server serves across several API
// calls, its log is readable by offset, and SIGTERM ends it, reported as
// its exit signal; a second signal is a conflict.
func TestProcessServer(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	marker := "served-" + randomHex(4)
	execOK(t, d, sb, "mkdir -p /tmp/www && echo "+marker+" > /tmp/www/index.html")
	p := startProc(t, d, sb, apitype.ExecRequest{Shell: "exec python3 -u -m http.server 8123 --bind 127.0.0.1", Cwd: "/tmp/www", Tag: "web"})
	awaitOutput(t, d.c, sb, "web", "Serving HTTP")
	for i := range 3 {
		if out := execOK(t, d, sb, "curl -sS -m 10 http://127.0.0.1:8123/"); strings.TrimSpace(out) != marker {
			t.Fatalf("request %d: %q, want %q", i, out, marker)
		}
	}
	got, err := d.c.Process(ctx, sb.id, sb.token, strconv.Itoa(p.Pid))
	if err != nil || got.Status != apitype.ProcessRunning || got.Tag != "web" {
		t.Fatalf("after the requests: %+v, %v", got, err)
	}
	full := awaitOutput(t, d.c, sb, "web", `"GET / HTTP/1.1" 200`)
	if n := strings.Count(full, `"GET / HTTP/1.1" 200`); n < 3 {
		t.Errorf("the log has %d requests, want 3:\n%s", n, full)
	}
	// By offset: a page, then the rest from where it ended.
	po, err := d.c.ProcessOutput(ctx, sb.id, sb.token, "web", 0, 10)
	if err != nil || po.NextOffset != 10 || len(po.Chunks) == 0 {
		t.Fatalf("first 10 bytes: %+v, %v", po, err)
	}
	rest, err := d.c.ProcessOutput(ctx, sb.id, sb.token, "web", 10, 1<<20)
	if err != nil || rest.Offset != 10 {
		t.Fatalf("from 10: %+v, %v", rest, err)
	}
	var joined strings.Builder
	for _, ch := range append(po.Chunks, rest.Chunks...) {
		joined.Write(ch.Bytes())
	}
	if !strings.HasPrefix(joined.String(), full[:min(len(full), joined.Len())]) || joined.Len() < len(full) {
		t.Errorf("paged output %q differs from the whole %q", joined.String(), full)
	}

	if _, err := d.c.Signal(ctx, sb.id, sb.token, "web", "TERM"); err != nil {
		t.Fatal(err)
	}
	var exit *apitype.ExitStatus
	err = d.c.FollowOutput(ctx, sb.id, sb.token, "web", 0, func(ev apitype.OutputEvent) error {
		exit = ev.Exit
		return nil
	})
	if err != nil || exit == nil || exit.Signal != "SIGTERM" || exit.ExitCode != -1 {
		t.Fatalf("after TERM: exit %+v, %v", exit, err)
	}
	if _, err := d.c.Signal(ctx, sb.id, sb.token, "web", "TERM"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "exited") {
		t.Errorf("a signal to the exited process: %v, want a 409 saying it exited", err)
	}
}

// TestProcessFollow: a job printing a line every 200 ms streams to a follow
// client as it runs, the first line arriving while the job still runs;
// a reattach from a new client sees the same output.
func TestProcessFollow(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	p := startProc(t, d, sb, apitype.ExecRequest{Shell: "for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep 0.2; done; echo done >&2"})
	ref := strconv.Itoa(p.Pid)
	var out strings.Builder
	var exit *apitype.ExitStatus
	statusAtFirst := ""
	var streams []string
	err := d.c.FollowOutput(ctx, sb.id, sb.token, ref, 0, func(ev apitype.OutputEvent) error {
		if len(ev.Bytes()) > 0 && statusAtFirst == "" {
			info, err := d.c.Process(ctx, sb.id, sb.token, ref)
			if err != nil {
				return err
			}
			statusAtFirst = info.Status
		}
		if ev.Stream != "" && (len(streams) == 0 || streams[len(streams)-1] != ev.Stream) {
			streams = append(streams, ev.Stream)
		}
		out.Write(ev.Bytes())
		exit = ev.Exit
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if statusAtFirst != apitype.ProcessRunning {
		t.Errorf("when the first line arrived the job was %q, want running", statusAtFirst)
	}
	if !strings.HasPrefix(out.String(), "line 1\nline 2\n") || !strings.HasSuffix(out.String(), "line 10\ndone\n") || exit == nil || exit.ExitCode != 0 {
		t.Errorf("followed %q, exit %+v", out.String(), exit)
	}
	if strings.Join(streams, ",") != "stdout,stderr" {
		t.Errorf("streams in order %v, want stdout then stderr", streams)
	}
	again := client.New(d.url, d.key)
	var out2 strings.Builder
	if err := again.FollowOutput(ctx, sb.id, sb.token, ref, 0, func(ev apitype.OutputEvent) error {
		out2.Write(ev.Bytes())
		return nil
	}); err != nil || out2.String() != out.String() {
		t.Errorf("reattach: %q, %v; want %q", out2.String(), err, out.String())
	}
}

// TestProcessStdin: stdin written in pieces reaches cat, closing it ends
// cat with the pieces as its output; stdin after that is a 409; bad
// references are 404 and 400.
func TestProcessStdin(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	startProc(t, d, sb, apitype.ExecRequest{Args: []string{"cat"}, Tag: "cat"})
	for _, piece := range []string{"one ", "two ", "three\n"} {
		if _, err := d.c.WriteStdin(ctx, sb.id, sb.token, "cat", strings.NewReader(piece), false); err != nil {
			t.Fatal(err)
		}
	}
	awaitOutput(t, d.c, sb, "cat", "three") // cat runs on, stdin open
	if res, err := d.c.WriteStdin(ctx, sb.id, sb.token, "cat", nil, true); err != nil || !res.Closed {
		t.Fatalf("close: %+v, %v", res, err)
	}
	var out strings.Builder
	var exit *apitype.ExitStatus
	if err := d.c.FollowOutput(ctx, sb.id, sb.token, "cat", 0, func(ev apitype.OutputEvent) error {
		out.Write(ev.Bytes())
		exit = ev.Exit
		return nil
	}); err != nil || out.String() != "one two three\n" || exit == nil || exit.ExitCode != 0 {
		t.Fatalf("cat wrote %q, exit %+v, %v", out.String(), exit, err)
	}
	if _, err := d.c.WriteStdin(ctx, sb.id, sb.token, "cat", strings.NewReader("late"), false); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stdin after close: %v, want 409", err)
	}
	if err := d.c.RemoveProcess(ctx, sb.id, sb.token, "cat"); err != nil {
		t.Errorf("remove the exited cat: %v", err)
	}
	if _, err := d.c.Process(ctx, sb.id, sb.token, "cat"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the removed cat: %v, want 404", err)
	}
	if _, err := d.c.Process(ctx, sb.id, sb.token, "999999"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown pid: %v, want 404", err)
	}
	if _, err := d.c.Signal(ctx, sb.id, sb.token, "999999", "TERM"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("signal to an unknown pid: %v, want 404", err)
	}
	if _, err := d.c.Process(ctx, sb.id, sb.token, "-1"); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("pid -1: %v, want 400", err)
	}
	if _, err := d.c.StartProcess(ctx, sb.id, sb.token, apitype.ExecRequest{Args: []string{"cat"}, Stdin: "x"}); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("background with stdin: %v, want 400", err)
	}
	// all=true lists the sandbox's other processes, with their command lines.
	execOK(t, d, sb, "sleep 313 >/dev/null 2>&1 < /dev/null &")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		all, err := d.c.Processes(ctx, sb.id, sb.token, true)
		found := false
		for _, p := range all {
			found = found || !p.Cove && strings.Join(p.Cmd, " ") == "sleep 313" && p.User == "root"
		}
		if found {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("processes?all=true: %+v, %v; want sleep 313 among them", all, err)
		}
	}
	if mine, err := d.c.Processes(ctx, sb.id, sb.token, false); err != nil || len(mine) != 0 {
		t.Errorf("processes after the remove: %+v, %v; want none", mine, err)
	}
}

// TestProcessBranch: a child of a branch of a sandbox with a running
// counter sees it alive with its output so far, and both count on
// independently: their outputs diverge after the branch.
func TestProcessBranch(t *testing.T) {
	d, src := suite.shared, newSandbox(t)
	ctx := context.Background()
	startProc(t, d, src, apitype.ExecRequest{Tag: "counter",
		Shell: "i=0; while true; do echo \"$i $(cat /proc/sys/kernel/hostname)\"; i=$((i+1)); sleep 0.1; done"})
	awaitOutput(t, d.c, src, "counter", "\n5 ")
	// A follow open on the source across the branch keeps reading.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan error, 1)
	var seen strings.Builder
	go func() {
		followed <- d.c.FollowOutput(fctx, src.id, src.token, "counter", 0, func(ev apitype.OutputEvent) error {
			seen.Write(ev.Bytes())
			return nil
		})
	}()
	res, err := d.c.Branch(ctx, src.id, src.token, apitype.BranchRequest{N: 1})
	if err != nil {
		t.Fatalf("branch: %v\n%s", err, d.logTail())
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, res.Tag) })
	kid := sandbox{res.Children[0].ID, res.Children[0].Token}
	t.Cleanup(func() { d.c.DeleteSandbox(ctx, kid.id) })

	info, err := d.c.Process(ctx, kid.id, kid.token, "counter")
	if err != nil || info.Status != apitype.ProcessRunning || info.OutputSize == 0 {
		t.Fatalf("in the child: %+v, %v", info, err)
	}
	// The child counts on, as itself; its first lines are the source's.
	kidOut := awaitOutput(t, d.c, kid, "counter", " "+kid.id+"\n")
	if !strings.HasPrefix(kidOut, "0 ") || strings.Count(kidOut, " "+src.id+"\n") < 5 {
		t.Errorf("the child's output does not start with the source's:\n%.400s", kidOut)
	}
	// A follow in the child resumes from an offset and sees new lines.
	n := int64(len(kidOut))
	kctx, kcancel := context.WithTimeout(ctx, 30*time.Second)
	defer kcancel()
	var kidMore strings.Builder
	errStop := errors.New("enough")
	err = d.c.FollowOutput(kctx, kid.id, kid.token, "counter", n, func(ev apitype.OutputEvent) error {
		if ev.Offset != 0 && ev.Offset < n {
			t.Errorf("a follow from %d got a chunk at %d", n, ev.Offset)
		}
		kidMore.Write(ev.Bytes())
		if strings.Count(kidMore.String(), "\n") >= 3 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || !strings.Contains(kidMore.String(), " "+kid.id+"\n") {
		t.Errorf("following the child: %q, %v", kidMore.String(), err)
	}
	srcOut := awaitOutput(t, d.c, src, "counter", strconv.Itoa(strings.Count(kidOut, "\n")+5)+" "+src.id)
	if strings.Contains(srcOut, kid.id) {
		t.Errorf("the source's output has the child's lines")
	}
	if p, err := d.c.Process(ctx, src.id, src.token, "counter"); err != nil || p.Status != apitype.ProcessRunning {
		t.Errorf("the source's counter after the branch: %+v, %v", p, err)
	}
	cancel()
	if err := <-followed; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("the source's follow across the branch: %v", err)
	}
	if !strings.HasPrefix(srcOut, seen.String()[:min(len(seen.String()), len(srcOut))]) || !strings.Contains(seen.String(), "\n5 ") {
		t.Errorf("the source's follow across the branch read %.200q, not the output", seen.String())
	}
}

// TestProcessCLI: cove exec --background, ps, logs, kill-proc and logs -f
// through the built binary.
func TestProcessCLI(t *testing.T) {
	d := suite.shared
	home := t.TempDir()
	id := strings.TrimSpace(coveCLI(t, d, home, "create", "-q"))
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), id) })
	if out := coveCLI(t, d, home, "exec", "--background", "--tag", "job", id, "--", "sh", "-c", "echo to-out; echo to-err >&2; exec sleep 60"); !strings.HasSuffix(out, " job\n") {
		t.Fatalf("exec --background: %q, want the pid and tag", out)
	}
	if out := coveCLI(t, d, home, "ps", id); !strings.Contains(out, "job") || !strings.Contains(out, "running") || !strings.Contains(out, "sleep 60") && !strings.Contains(out, "sh -c") {
		t.Errorf("ps:\n%s", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for out := ""; !strings.Contains(out, "to-err"); out = coveCLI(t, d, home, "logs", id, "job") {
		if time.Now().After(deadline) {
			t.Fatalf("logs: %q, want both lines", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	coveCLI(t, d, home, "kill-proc", id, "job")
	cmd := exec.Command(suite.bin, "logs", "-f", id, "job")
	cmd.Env = cliEnv(d, home)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+15 || stdout.String() != "to-out\n" || !strings.Contains(stderr.String(), "to-err") {
		t.Errorf("logs -f of a process killed by TERM: %v, stdout %q, stderr %q; want exit 143 and the streams apart", err, stdout.String(), stderr.String())
	}
	if out := coveCLI(t, d, home, "ps", "--json", id); !strings.Contains(out, `"signal": "SIGTERM"`) {
		t.Errorf("ps --json after kill-proc:\n%s", out)
	}
}

// mcpAwaitOutput calls read_process_output until the process's output
// holds text, and returns the output.
func mcpAwaitOutput(t *testing.T, cs *mcp.ClientSession, id string, pid int, text string) string {
	t.Helper()
	var all strings.Builder
	var off int64
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var ro struct {
			Output     string              `json:"output"`
			NextOffset int64               `json:"next_offset"`
			Exit       *apitype.ExitStatus `json:"exit"`
		}
		callOK(t, cs, "read_process_output", map[string]any{"sandbox_id": id, "pid": pid, "offset": off}, &ro)
		all.WriteString(ro.Output)
		off = ro.NextOffset
		if strings.Contains(all.String(), text) {
			return all.String()
		}
		if ro.Exit != nil || time.Now().After(deadline) {
			t.Fatalf("process %d never wrote %q (exit %+v): %q", pid, text, ro.Exit, all.String())
		}
	}
}
