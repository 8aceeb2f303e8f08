package sandbox

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestExtend(t *testing.T) {
	e := newEnv(t)
	info := e.createOne(t, CreateOptions{TTL: time.Minute})
	tests := []struct {
		name string
		id   string
		ttl  time.Duration
		want error
	}{
		{"zero", info.ID, 0, ErrInvalid},
		{"negative", info.ID, -time.Second, ErrInvalid},
		{"over max", info.ID, testLimits.MaxTTL + time.Second, ErrInvalid},
		{"unknown id", "sb-000000000000", time.Minute, ErrNoSandbox},
		{"longer", info.ID, 30 * time.Minute, nil},
		{"max", info.ID, testLimits.MaxTTL, nil},
		{"shorter", info.ID, 2 * time.Second, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := e.svc.Get(context.Background(), info.ID)
			t0 := time.Now()
			got, err := e.svc.Extend(testCtx(t), tc.id, tc.ttl)
			if tc.want != nil {
				wantErr(t, err, tc.want)
				if after, _ := e.svc.Get(context.Background(), info.ID); !after.ExpiresAt.Equal(before.ExpiresAt) {
					t.Errorf("a refused extend moved the expiry from %v to %v", before.ExpiresAt, after.ExpiresAt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ExpiresAt.Before(t0.Add(tc.ttl)) || got.ExpiresAt.After(time.Now().Add(tc.ttl)) {
				t.Errorf("expires at %v, want %s from now", got.ExpiresAt, tc.ttl)
			}
			if g, _ := e.svc.Get(context.Background(), info.ID); !g.ExpiresAt.Equal(got.ExpiresAt) {
				t.Errorf("Get says expiry %v, Extend said %v", g.ExpiresAt, got.ExpiresAt)
			}
			if rec := e.row(t, info.ID); rec.ExpiresAt.UnixMilli() != got.ExpiresAt.UnixMilli() {
				t.Errorf("store expiry %v, want %v", rec.ExpiresAt, got.ExpiresAt)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	keep := e.createOne(t, CreateOptions{})
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := e.rt.IDs(); !slices.Equal(got, []string{keep.ID}) {
		t.Errorf("runtime holds %v, want [%s]", got, keep.ID)
	}
	if got := e.rows(t); !slices.Equal(got, []string{keep.ID}) {
		t.Errorf("store holds %v, want [%s]", got, keep.ID)
	}
	wantErr(t, e.svc.Delete(ctx, info.ID), ErrNotFound)
	_, err := e.svc.Get(context.Background(), info.ID)
	wantErr(t, err, ErrNotFound)
	_, err = e.svc.Open(context.Background(), info.ID, info.Token)
	wantErr(t, err, ErrNotFound)
	wantErr(t, e.svc.Delete(ctx, "sb-000000000000"), ErrNotFound)
	if n := e.svc.Stats().Destroyed.Load(); n != 1 {
		t.Errorf("Stats().Destroyed = %d, want 1", n)
	}
}
