package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestErrStatusNoSpace: a save refused for a full disk is a 507 with its
// own code and a hint naming where to look for what to delete.
func TestErrStatusNoSpace(t *testing.T) {
	err := fmt.Errorf("%w: the disk the daemon keeps snapshots on is full", sandbox.ErrNoSpace)
	if status, code := errStatus(err); status != http.StatusInsufficientStorage || code != apitype.CodeNoSpace {
		t.Errorf("errStatus = %d %q, want 507 %q", status, code, apitype.CodeNoSpace)
	}
	if h := hint(err); !strings.Contains(h, "/v1/snapshots") {
		t.Errorf("hint %q names nothing to delete", h)
	}
}
