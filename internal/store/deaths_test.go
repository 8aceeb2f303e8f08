package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestDeaths(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, _ := openWithRunning(t, path, "sb-dead", "sb-live")
	now := time.UnixMilli(time.Now().UnixMilli())
	want := Death{Reason: "oom_killed", Detail: "at its limit", At: now}
	if err := s.SetDead(ctx, "sb-dead", "dead", want); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDead(ctx, "sb-missing", "dead", want); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetDead(missing) = %v, want ErrNotFound", err)
	}
	s.Close()

	// Reopened, migrations and all: the death survives, with the status.
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deaths, err := s.Deaths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(deaths) != 1 || deaths["sb-dead"] != want {
		t.Errorf("Deaths = %+v, want only sb-dead: %+v", deaths, want)
	}
	recs, err := s.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if wantStatus := map[string]string{"sb-dead": "dead", "sb-live": "running"}[r.ID]; r.Status != wantStatus {
			t.Errorf("%s: status %q, want %q", r.ID, r.Status, wantStatus)
		}
	}
	// The death goes with its row.
	if err := s.DeleteSandbox(ctx, "sb-dead"); err != nil {
		t.Fatal(err)
	}
	if deaths, _ := s.Deaths(ctx); len(deaths) != 0 {
		t.Errorf("Deaths after delete = %+v", deaths)
	}
}
