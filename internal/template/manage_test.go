package template

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/runtime/runtimetest"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

// newManager is a Manager over a sandbox service on the fake runtime.
func newManager(t *testing.T) (*Manager, *sandbox.Service) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	svc := sandbox.New(sandbox.Config{
		Runtime: runtimetest.New(t), Store: st, Images: runtimetest.NewImages(map[string]string{"default": "default-0001"}),
		DefaultImage: "default", Logger: log, StartTimeout: 5 * time.Second, SnapshotDir: filepath.Join(t.TempDir(), "snapshots"),
		Limits: sandbox.Limits{DefaultTTL: time.Minute, MaxTTL: time.Hour, DefaultCPUs: 1, MaxCPUs: 2, DefaultMemoryMiB: 256,
			MaxMemoryMiB: 1024, MaxSandboxes: 10, DefaultDiskMiB: 512, MaxDiskMiB: 1024, DefaultPids: 128, MaxPids: 256, OpenFiles: 256},
	})
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return New(Config{Service: svc, Store: st, TmpDir: t.TempDir(), Logger: log}), svc
}

// TestTemplateTenancy: a template is its builder's tenant's: others do not
// list, get, delete or spawn from it, and its name is taken for them
// without saying whose; one the daemon built is shared, not theirs to
// delete.
func TestTemplateTenancy(t *testing.T) {
	m, svc := newManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acme := tenant.NewContext(ctx, tenant.Principal{KeyID: "k1", Tenant: "acme"})
	beta := tenant.NewContext(ctx, tenant.Principal{KeyID: "k2", Tenant: "beta"})
	df := []byte("FROM default\nRUN echo hi > /dev/null\n")
	if _, err := m.Build(acme, BuildOptions{Name: "mine", Dockerfile: df, PoolSize: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Build(ctx, BuildOptions{Name: "shared", Dockerfile: df, PoolSize: 0}); err != nil {
		t.Fatal(err)
	}
	names := func(ctx context.Context) []string {
		infos, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, i := range infos {
			out = append(out, i.Name)
		}
		return out
	}
	if got := names(beta); len(got) != 1 || got[0] != "shared" {
		t.Errorf("beta lists %v, want only the shared template", got)
	}
	if got := names(acme); len(got) != 2 {
		t.Errorf("acme lists %v, want its own and the shared one", got)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"get", func() error { _, err := m.Get(beta, "mine"); return err }, sandbox.ErrNotFound},
		{"delete", func() error { return m.Delete(beta, "mine") }, sandbox.ErrNotFound},
		{"spawn", func() error {
			_, err := svc.Create(beta, sandbox.CreateOptions{SnapshotTag: "mine"})
			return err
		}, sandbox.ErrNotFound},
		{"build over it", func() error {
			_, err := m.Build(beta, BuildOptions{Name: "mine", Dockerfile: df})
			return err
		}, sandbox.ErrConflict},
		{"delete the shared one", func() error { return m.Delete(beta, "shared") }, sandbox.ErrForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("beta's %s: %v, want %v", tt.name, err, tt.want)
			}
		})
	}
	if _, err := svc.Create(beta, sandbox.CreateOptions{SnapshotTag: "shared"}); err != nil {
		t.Errorf("beta's spawn from the shared template: %v", err)
	}
	if _, err := m.Get(acme, "mine"); err != nil {
		t.Errorf("acme's own template: %v", err)
	}
	if err := m.Delete(acme, "mine"); err != nil {
		t.Errorf("acme's delete of its template: %v", err)
	}
}
