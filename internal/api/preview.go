package api

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/internal/sandbox"
)

// PreviewBackend is the sandbox service as the preview proxy sees it: a
// sandbox or port the service does not find is preview.ErrNotFound.
func PreviewBackend(svc *sandbox.Service) preview.Backend { return previewBackend{svc} }

type previewBackend struct{ svc *sandbox.Service }

func (b previewBackend) Exposure(id string, port int) (string, bool, error) {
	token, public, err := b.svc.Exposure(id, port)
	return token, public, previewErr(err)
}

func (b previewBackend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	c, err := b.svc.DialPort(ctx, id, port)
	return c, previewErr(err)
}

func previewErr(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("%w: %v", preview.ErrNotFound, err)
	}
	return err
}
