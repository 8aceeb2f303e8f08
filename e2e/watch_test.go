package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// watchEvents runs a watch in the background; its events, as "type path"
// relative to dir, come on the channel, which closes when the watch ends.
func watchEvents(t *testing.T, ctx context.Context, sb sandbox, dir string, recursive bool) <-chan string {
	t.Helper()
	ch := make(chan string, 1024)
	ready := make(chan error, 1)
	go func() {
		defer close(ch)
		err := suite.shared.c.Watch(ctx, sb.id, sb.token, dir, recursive, func(ev apitype.WatchEvent) error {
			if ev.Type == apitype.WatchReady {
				ready <- nil
				return nil
			}
			if ev.Type != apitype.WatchChmod {
				ch <- ev.Type + " " + strings.TrimPrefix(strings.TrimPrefix(ev.Path, dir), "/")
			}
			return nil
		})
		select {
		case ready <- err:
		default:
		}
		if err != nil && !errors.Is(err, client.ErrWatchEnded) {
			ch <- "error " + err.Error()
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("watch %s: %v", dir, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("watch %s: no ready record", dir)
	}
	return ch
}

// collect reads events, dropping repeats of the one before (a write may be
// reported in pieces), until want arrives.
func collect(t *testing.T, ch <-chan string, want string) []string {
	t.Helper()
	var got []string
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended after %v, before %q", got, want)
			}
			if len(got) == 0 || got[len(got)-1] != ev {
				got = append(got, ev)
			}
			if ev == want {
				return got
			}
		case <-timeout:
			t.Fatalf("no %q within a minute; got %v", want, got)
		}
	}
}

// TestWatch: creating, writing, renaming and removing files in a watched
// directory, also in a subdirectory made after the watch started, yields
// those events in order; removing the directory ends the watch.
func TestWatch(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	execOK(t, d, sb, "mkdir -p /work/w")
	ch := watchEvents(t, ctx, sb, "/work/w", true)

	execOK(t, d, sb, "cd /work/w && echo a > a && echo more >> a && mv a b && rm b && mkdir sub")
	got := collect(t, ch, "create sub")
	execOK(t, d, sb, "cd /work/w && echo c > sub/c && mv sub/c sub/d && rm sub/d")
	got = append(got, collect(t, ch, "remove sub/d")...)
	want := "create a|write a|rename a|create b|remove b|create sub|create sub/c|write sub/c|rename sub/c|create sub/d|remove sub/d"
	if s := strings.Join(got, "|"); s != want {
		t.Errorf("events:\n got %s\nwant %s", s, want)
	}
	execOK(t, d, sb, "rm -r /work/w")
	collect(t, ch, "end ")

	if err := d.c.Watch(ctx, sb.id, sb.token, "/work/missing", false, func(apitype.WatchEvent) error { return nil }); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("watch of a missing dir: %v, want a 404", err)
	}
	execOK(t, d, sb, "touch /work/file")
	if err := d.c.Watch(ctx, sb.id, sb.token, "/work/file", false, func(apitype.WatchEvent) error { return nil }); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("watch of a file: %v, want a 400", err)
	}
}

// TestWatchCLI: cove watch --json prints a ready record, then the changes.
func TestWatchCLI(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.bin, "watch", "--json", "--sandbox-token", sb.token, sb.id, ".")
	cmd.Env = cliEnv(d, t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	next := func() apitype.WatchEvent {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("cove watch ended: %v", sc.Err())
		}
		var ev apitype.WatchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("cove watch printed %q: %v", sc.Text(), err)
		}
		return ev
	}
	if ev := next(); ev.Type != apitype.WatchReady || ev.Path != "/work" {
		t.Fatalf("first record %+v, want ready on /work", ev)
	}
	execOK(t, d, sb, "touch /work/hello")
	if ev := next(); ev.Type != apitype.WatchCreate || ev.Path != "/work/hello" || ev.Time.IsZero() {
		t.Errorf("after touch: %+v, want the create of /work/hello", ev)
	}
}
