package runtimetest

import (
	"errors"
	"sync"
)

// Images resolves image names and ids from a map, for tests only. Its
// rootfs paths do not exist: the Fake never reads them.
type Images struct {
	mu  sync.Mutex
	ids map[string]string // name -> id
}

// NewImages returns an Images that knows ids, a map from name to id. It
// keeps ids and changes it on Set.
func NewImages(ids map[string]string) *Images { return &Images{ids: ids} }

// Set points an image name at a new id, as a rebuilt image does.
func (im *Images) Set(name, id string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.ids[name] = id
}

// Resolve returns the id and rootfs of the image named or identified by
// nameOrID.
func (im *Images) Resolve(nameOrID string) (id, rootfs string, err error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for name, id := range im.ids {
		if nameOrID == name || nameOrID == id {
			return id, "fake-rootfs/" + id, nil
		}
	}
	return "", "", errors.New("no such image")
}
