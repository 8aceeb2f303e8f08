package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestKilledMidCall kills the daemon with SIGKILL while a create of ten
// and then a branch with ten children are under way, each once the first
// of its sandboxes answers (the daemon starts two at a time, so most are
// still to start), and restarts it: nothing of the unanswered call is
// left, neither listed nor on the host, and what existed before is intact.
func TestKilledMidCall(t *testing.T) {
	// Two starts at a time: the first sandbox answers sooner (under TCG
	// above all), and more of the call is still to start when it does.
	d, err := startDaemon(filepath.Join(suite.tmp, "killed-mid-call"), "--start-parallelism", "2")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := countResources(t, d.stateDir())
	src := create(t, d, apitype.CreateSandboxRequest{})[0]
	execOK(t, d, src, "echo kept > /work/note")
	defer func() {
		d.stop()
		waitResources(t, d.stateDir(), base)
	}()

	for _, call := range []struct {
		name, path, token, body string
	}{
		{"create of 10", "/v1/sandboxes", "", `{"n":10}`},
		{"branch with children", "/v1/sandboxes/" + src.id + "/branch", src.token, `{"n":10}`},
	} {
		logged := d.logLen()
		done := make(chan int, 1)
		go func() {
			done <- postQuietly(d, call.path, call.token, call.body)
		}()
		// Kill once the first of the call's sandboxes is up.
		for deadline := time.Now().Add(5 * time.Minute); !strings.Contains(d.logSince(logged), `msg="sandbox created"`); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no sandbox came up; log:\n%s", call.name, d.logTail())
			}
		}
		d.kill9()
		if status := <-done; status != 0 {
			t.Fatalf("%s answered %d before the daemon was killed: kill earlier", call.name, status)
		}
		if err := d.start(); err != nil {
			t.Fatal(err)
		}
		list, err := d.c.ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != src.id {
			t.Errorf("%s killed: after restart the daemon lists %d sandboxes (%+v), want only %s", call.name, len(list), list, src.id)
		}
		if snaps, _ := d.c.ListSnapshots(ctx); len(snaps) != 0 {
			t.Errorf("%s killed: after restart the daemon lists snapshots %+v, want none", call.name, snaps)
		}
		if ents, _ := os.ReadDir(filepath.Join(d.stateDir(), "snapshots")); len(ents) != 0 {
			t.Errorf("%s killed: %d entries left in the snapshot directory", call.name, len(ents))
		}
		r := countResources(t, d.stateDir())
		if r.Dirs != base.Dirs+1 || r.Netns != base.Netns+netnsPerSandbox() || r.EmptyCgroups != base.EmptyCgroups {
			t.Errorf("%s killed: after restart %+v on the host, want one sandbox's over %+v", call.name, r, base)
		}
		if got := execOK(t, d, src, "cat /work/note"); got != "kept\n" {
			t.Fatalf("%s killed: the sandbox made before reads %q", call.name, got)
		}
	}
}

// postQuietly POSTs body to path on d with the API key and a sandbox
// token, and returns the status, or 0 if no answer came.
func postQuietly(d *daemon, path, token, body string) int {
	req, err := http.NewRequest(http.MethodPost, d.url+path, strings.NewReader(body))
	if err != nil {
		return -1
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	if token != "" {
		req.Header.Set(apitype.SandboxTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// logLen is how long the daemon's log is now.
func (d *daemon) logLen() int64 {
	fi, err := os.Stat(filepath.Join(d.dir, "daemon.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince is the daemon's log from offset on.
func (d *daemon) logSince(offset int64) string {
	f, err := os.Open(filepath.Join(d.dir, "daemon.log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<40))
	return string(b)
}
