package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(time.Now().UnixMilli())
	a := Key{ID: "key-a", Name: "ci", Tenant: "acme", Hash: "h1", CreatedAt: now,
		Quota: KeyQuota{MaxSandboxes: 5, MaxVCPUs: 4, MaxMemoryMiB: 2048, MaxTTLSecs: 600, MaxSpawnN: 3, MaxDiskMiB: 100}}
	b := Key{ID: "key-b", Name: "ops", Tenant: "default", Admin: true, Hash: "h2", CreatedAt: now.Add(time.Second)}
	for _, k := range []Key{a, b} {
		if err := s.PutKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		k    Key
	}{
		{"taken id", Key{ID: "key-a", Name: "x", Tenant: "t", Hash: "h3", CreatedAt: now}},
		{"taken hash", Key{ID: "key-c", Name: "x", Tenant: "t", Hash: "h1", CreatedAt: now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.PutKey(ctx, tt.k); !errors.Is(err, ErrExists) {
				t.Fatalf("PutKey = %v, want ErrExists", err)
			}
		})
	}
	if err := s.RevokeKey(ctx, "key-a", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A second revocation keeps the first time.
	if err := s.RevokeKey(ctx, "key-a", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "key-nope", now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RevokeKey(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.Key(ctx, "key-nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Key(unknown) = %v, want ErrNotFound", err)
	}
	s.Close()

	// Durable across a reopen.
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.RevokedAt = now.Add(time.Minute)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Keys = %+v\nwant %+v", got, []Key{a, b})
	}
	k, err := s.Key(ctx, "key-b")
	if err != nil || k != b {
		t.Fatalf("Key(key-b) = %+v, %v", k, err)
	}
	if err := s.DeleteKey(ctx, "key-b"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Keys(ctx); len(got) != 1 {
		t.Fatalf("after delete: %+v", got)
	}
}
