package keys

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
)

// MemStore is a Store in memory, for tests and for an API served without
// a database.
type MemStore struct {
	mu   sync.Mutex
	keys []store.Key
}

// PutKey implements Store.
func (s *MemStore) PutKey(_ context.Context, k store.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(s.keys, func(o store.Key) bool { return o.ID == k.ID || o.Hash == k.Hash }) {
		return fmt.Errorf("store: put key %s: %w", k.ID, store.ErrExists)
	}
	s.keys = append(s.keys, k)
	return nil
}

// RevokeKey implements Store.
func (s *MemStore) RevokeKey(_ context.Context, id string, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.keys {
		if s.keys[i].ID == id {
			if s.keys[i].RevokedAt.IsZero() {
				s.keys[i].RevokedAt = t
			}
			return nil
		}
	}
	return fmt.Errorf("store: key %s: %w", id, store.ErrNotFound)
}

// Keys implements Store.
func (s *MemStore) Keys(context.Context) ([]store.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys), nil
}
