package store

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// Exposed ports are kept per sandbox, changed in place, survive a rewrite
// of the sandbox's row (a commit), and go with the row.
func TestPorts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, recs := openWithRunning(t, path, "sb-1", "sb-2")
	for _, c := range []struct {
		id string
		p  Port
	}{
		{"sb-1", Port{Port: 8000, Token: "a"}},
		{"sb-1", Port{Port: 80, Public: true, Token: "b"}},
		{"sb-2", Port{Port: 3000, Token: "c"}},
		{"sb-1", Port{Port: 8000, Public: true, Token: "a"}}, // changed in place
	} {
		if err := s.PutPort(ctx, c.id, c.p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutPort(ctx, "missing", Port{Port: 1, Token: "x"}); err == nil {
		t.Error("a port of a sandbox without a row was accepted")
	}
	// Rewriting the row, as a commit does, keeps its ports.
	if err := s.Commit(ctx, recs[:1], ""); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string][]Port{
		"sb-1": {{Port: 80, Public: true, Token: "b"}, {Port: 8000, Public: true, Token: "a"}},
		"sb-2": {{Port: 3000, Token: "c"}},
	}
	if got, err := s.Ports(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Ports = %+v, %v; want %+v", got, err, want)
	}
	if err := s.DeletePort(ctx, "sb-1", 80); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePort(ctx, "sb-1", 81); err != nil {
		t.Fatalf("DeletePort of a missing port: %v", err)
	}
	if err := s.DeleteSandbox(ctx, "sb-2"); err != nil {
		t.Fatal(err)
	}
	want = map[string][]Port{"sb-1": {{Port: 8000, Public: true, Token: "a"}}}
	if got, err := s.Ports(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after deletes: Ports = %+v, %v; want %+v", got, err, want)
	}
}

// openWithRunning opens the database at path with running sandboxes ids;
// the caller closes it.
func openWithRunning(t *testing.T, path string, ids ...string) (*Store, []Sandbox) {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(time.Now().UnixMilli())
	var recs []Sandbox
	for _, id := range ids {
		rec := Sandbox{ID: id, Status: "running", Backend: "gvisor", Image: "i", CPUs: 1, MemoryMiB: 512,
			TokenHash: "h", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := s.PutSandbox(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	return s, recs
}
