package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// watchUntil reads w's events, as "type rel" strings, until one is want
// (or the watch ends), and returns them.
func watchUntil(t *testing.T, w *agentproto.Watch, root, want string) []string {
	t.Helper()
	var got []string
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		rel, _ := filepath.Rel(root, ev.Path)
		s := ev.Type + " " + rel
		if ev.Type == agentproto.WatchChmod {
			continue // some file systems report an attribute change beside a write
		}
		if len(got) == 0 || got[len(got)-1] != s { // a write may come in pieces
			got = append(got, s)
		}
		if s == want || ev.Type == agentproto.WatchEnd {
			return got
		}
	}
}

// TestWatch makes, writes, renames and removes files in a watched tree,
// also in a directory made after the watch started, and removes the tree.
func TestWatch(t *testing.T) {
	e := newTestEnv(t)
	root := filepath.Join(e.dir, "w")
	os.MkdirAll(root, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := e.c.Watch(ctx, agentproto.WatchRequest{Path: "w", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ev, err := w.Next(); err != nil || ev.Type != agentproto.WatchReady {
		t.Fatalf("first record %+v, %v", ev, err)
	}
	p := func(rel string) string { return filepath.Join(root, rel) }
	os.WriteFile(p("a"), []byte("1"), 0o644)
	os.Rename(p("a"), p("b"))
	os.Remove(p("b"))
	os.Mkdir(p("sub"), 0o755)
	got := watchUntil(t, w, root, "create sub")
	// The subdirectory is watched once its create is reported.
	os.WriteFile(p("sub/c"), []byte("2"), 0o644)
	got = append(got, watchUntil(t, w, root, "write sub/c")...)
	os.RemoveAll(root)
	got = append(got, watchUntil(t, w, root, "end .")...)
	want := "create a|write a|rename a|create b|remove b|create sub|create sub/c|write sub/c"
	if s := strings.Join(got, "|"); !strings.HasPrefix(s, want) || !strings.HasSuffix(s, "|end .") {
		t.Errorf("events:\n got %s\nwant %s|...|end .", s, want)
	}
}

func TestWatchBadPath(t *testing.T) {
	e := newTestEnv(t)
	os.WriteFile(filepath.Join(e.dir, "f"), nil, 0o644)
	ctx := context.Background()
	if _, err := e.c.Watch(ctx, agentproto.WatchRequest{Path: "missing"}); agentproto.CodeOf(err) != agentproto.CodeNotFound {
		t.Errorf("Watch(missing) = %v", err)
	}
	if _, err := e.c.Watch(ctx, agentproto.WatchRequest{Path: "f"}); agentproto.CodeOf(err) != agentproto.CodeInvalid {
		t.Errorf("Watch(file) = %v", err)
	}
}

// A queue full of events counts the rest in one overflow record, in
// place, and takes events again once drained.
func TestEventQueueOverflow(t *testing.T) {
	q := newEventQueue(2)
	for range 5 {
		q.push(agentproto.WatchEvent{Type: agentproto.WatchWrite})
	}
	q.push(agentproto.WatchEvent{Type: agentproto.WatchOverflow})
	evs := q.take()
	if len(evs) != 3 || evs[2].Type != agentproto.WatchOverflow || evs[2].Dropped != 3 {
		t.Fatalf("queue %+v", evs)
	}
	q.push(agentproto.WatchEvent{Type: agentproto.WatchCreate})
	if evs := q.take(); len(evs) != 1 || evs[0].Type != agentproto.WatchCreate {
		t.Fatalf("after the drain %+v", evs)
	}
}
