package runtimetest

import (
	"errors"
	"sync"

	"github.com/cove-sandbox/cove/internal/runtime"
)

// Images resolves image names and ids from a map, for tests only. Its
// paths do not exist: the Fake never reads them.
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

// Resolve returns the id and files of the image named or identified by
// nameOrID.
func (im *Images) Resolve(nameOrID string) (id string, files runtime.ImageFiles, err error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for name, id := range im.ids {
		if nameOrID == name || nameOrID == id {
			vm := "fake-vm/" + id + "/"
			return id, runtime.ImageFiles{Rootfs: "fake-rootfs/" + id, Kernel: vm + "vmlinux", Initrd: vm + "initrd", Disk: vm + "disk"}, nil
		}
	}
	return "", runtime.ImageFiles{}, errors.New("no such image")
}
