package e2e

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestTemplateFromRegistry builds a template FROM a registry reference: the
// daemon pulls the image (here from a registry this test serves on
// loopback) into its image store, and a second build finds it there.
func TestTemplateFromRegistry(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/cove/busybox:1"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, testOCIImage(t)); err != nil {
		t.Fatal(err)
	}
	tmpl := "e2e-pull-" + randomHex(3)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM " + ref + "\nRUN echo built > /data/made\n"})
	ti, progress, _ := templateCLI(t, d, "-t", tmpl, dir)
	// The template first, then the image it holds (the shared image
	// directory keeps nothing of this test): Cleanup runs in reverse, so
	// one function does both, in order.
	t.Cleanup(func() {
		ctx := context.Background()
		if err := d.c.DeleteTemplate(ctx, tmpl); err != nil {
			t.Errorf("delete template %s: %v", tmpl, err)
		}
		// By its name: that removes its versions and its current pointer.
		img, err := d.c.GetImage(ctx, ti.Image)
		if errors.Is(err, client.ErrNotFound) {
			return
		}
		if err == nil {
			_, err = d.c.DeleteImage(ctx, img.Name)
		}
		if err != nil {
			t.Errorf("delete the pulled image %s: %v", ti.Image, err)
		}
	})
	if ti.Base != ref {
		t.Errorf("base %q, want %q\n%s", ti.Base, ref, progress)
	}
	pulled, err := d.c.GetImage(ctx, ti.Image)
	if err != nil || pulled.Source != "ref "+ref {
		t.Errorf("the pulled image %q: %+v, %v", ti.Image, pulled, err)
	}
	sb := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: tmpl})[0]
	defer d.c.DeleteSandbox(ctx, sb.id)
	if out := execOK(t, d, sb, "cat /data/made; test -e /data/gone || echo gone"); out != "built\ngone\n" {
		t.Errorf("in a sandbox of the template: %q, want built, gone", out)
	}
	// The image is local now: a rebuild needs no registry.
	srv.Close()
	if ti, progress, _ = templateCLI(t, d, "-t", tmpl, dir); !ti.Cached {
		t.Errorf("a rebuild with the registry gone was not all cached:\n%s", progress)
	}
}
