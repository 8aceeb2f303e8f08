package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-sandbox/cove/internal/image/ocigen"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// busyboxApplets are linked to /bin/busybox in the test image: what the
// checks inside the sandbox run.
var busyboxApplets = []string{"sh", "cat", "ls", "stat", "test", "echo", "id"}

// testOCIImage is an image of the host's static busybox in two layers: the
// second deletes a file of the first (a whiteout), hides a directory's
// old content (an opaque whiteout) and adds an executable; a file and a
// directory are owned by uid 1000. extra goes into the second layer.
func testOCIImage(t *testing.T, extra ...ocigen.Entry) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the test image needs the host's static busybox (busybox-static): %v", err)
	}
	l1 := []ocigen.Entry{
		ocigen.Dir("bin/", 0o755, 0, 0),
		{Hdr: ocigen.File("bin/busybox", 0o755, 0, 0, "").Hdr, Body: bb},
		ocigen.Dir("etc/", 0o755, 0, 0),
		ocigen.File("etc/passwd", 0o644, 0, 0, "root:x:0:0:root:/root:/bin/sh\n"),
		ocigen.File("etc/group", 0o644, 0, 0, "root:x:0:\n"),
		ocigen.Dir("data/", 0o755, 0, 0),
		ocigen.File("data/gone", 0o644, 0, 0, "deleted by the second layer\n"),
		ocigen.File("data/owned", 0o640, 1000, 1000, "owned by 1000\n"),
		ocigen.Dir("data/home/", 0o750, 1000, 1000),
		ocigen.Dir("opq/", 0o755, 0, 0),
		ocigen.File("opq/old", 0o644, 0, 0, "hidden by the opaque whiteout\n"),
	}
	for _, a := range busyboxApplets {
		l1 = append(l1, ocigen.Symlink("bin/"+a, "busybox"))
	}
	l2 := append([]ocigen.Entry{
		ocigen.Whiteout("data", "gone"),
		ocigen.File("data/run.sh", 0o755, 0, 0, "#!/bin/sh\necho ran\n"),
		ocigen.Dir("opq/", 0o755, 0, 0),
		ocigen.File("opq/.wh..wh..opq", 0o644, 0, 0, ""),
		ocigen.File("opq/new", 0o644, 0, 0, "new\n"),
	}, extra...)
	var layers [][]byte
	for _, l := range [][]ocigen.Entry{l1, l2} {
		b, err := ocigen.LayerTar(l)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, b)
	}
	img, err := ocigen.Image(v1.Config{Env: []string{"PATH=/bin", "GREETING=hi"}, WorkingDir: "/data", Cmd: []string{"/bin/sh"}}, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageImport writes an OCI archive, imports it (as an OCI layout
// through the API, as a docker save archive through the CLI), spawns a
// sandbox on it and checks inside: the whiteouts applied, owners and modes
// as the layers say, cove-agent serving. An image in use is not deleted.
func TestImageImport(t *testing.T) {
	d := suite.shared
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img := testOCIImage(t)
	var layout bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &layout, img); err != nil {
		t.Fatal(err)
	}
	name := "e2e-oci-" + randomHex(4)
	var progress bytes.Buffer
	info, err := d.c.ImportImage(ctx, name, bytes.NewReader(layout.Bytes()), &progress)
	if err != nil {
		t.Fatalf("import: %v\nprogress:\n%s\ndaemon log:\n%s", err, progress.String(), d.logTail())
	}
	t.Cleanup(func() { d.c.DeleteImage(context.Background(), name) })
	t.Logf("import progress:\n%s", progress.String())
	if !strings.Contains(progress.String(), "layer 2/2") {
		t.Errorf("progress names no layers:\n%s", progress.String())
	}
	if info.Name != name || !info.Current || info.Config == nil || info.Config.WorkingDir != "/data" {
		t.Errorf("imported %+v", info)
	}
	if backend() == "qemu" && !info.VM {
		t.Errorf("imported under QEMU without VM artifacts: %+v", info)
	}

	sb := create(t, d, apitype.CreateSandboxRequest{Image: name})[0]
	out := execOK(t, d, sb, `test ! -e /data/gone && echo gone-absent; stat -c '%n %u:%g %a' /data/owned /data/home /data/run.sh; /data/run.sh; ls /opq`)
	for _, want := range []string{"gone-absent", "/data/owned 1000:1000 640", "/data/home 1000:1000 750", "/data/run.sh 0:0 755", "ran", "new"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside the sandbox:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "old") {
		t.Errorf("the opaque whiteout left /opq/old:\n%s", out)
	}
	// In use: refused, and still there.
	if _, err := d.c.DeleteImage(ctx, name); !errors.Is(err, client.ErrConflict) {
		t.Errorf("delete an image in use: %v, want a conflict", err)
	}
	if err := d.c.DeleteSandbox(ctx, sb.id); err != nil {
		t.Fatal(err)
	}

	// The same image again, as a docker save archive through the CLI.
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ocigen.WriteDockerSave(archive, img); err != nil {
		t.Fatal(err)
	}
	cli := coveCLI(t, d, t.TempDir(), "image", "import", archive, "--name", name+"-cli")
	t.Cleanup(func() { d.c.DeleteImage(context.Background(), name+"-cli") })
	if !strings.Contains(cli, name+"-cli-") || !strings.Contains(cli, "layer 1/2") {
		t.Errorf("cove image import:\n%s", cli)
	}
	sb2 := create(t, d, apitype.CreateSandboxRequest{Image: name + "-cli"})[0]
	if out := execOK(t, d, sb2, `stat -c '%u %a' /data/owned; test -e /data/gone || echo absent`); !strings.Contains(out, "1000 640") || !strings.Contains(out, "absent") {
		t.Errorf("docker save import, inside:\n%s", out)
	}
	d.c.DeleteSandbox(ctx, sb2.id)

	imgs, err := d.c.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range imgs {
		found = found || i.ID == info.ID
	}
	if !found {
		t.Errorf("GET /v1/images lacks %s", info.ID)
	}
	removed, err := d.c.DeleteImage(ctx, name)
	if err != nil || len(removed) != 1 || removed[0] != info.ID {
		t.Errorf("delete %s: %v %v", name, removed, err)
	}
	if _, err := d.c.GetImage(ctx, name); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get a deleted image: %v, want not found", err)
	}
}

// TestImageImportBad: a corrupt archive, a truncated one and a layer with
// a "../" entry are each refused with an error naming what is wrong, and
// leave no image (nor work files) behind.
func TestImageImportBad(t *testing.T) {
	d := suite.shared
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var good, escape bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &good, testOCIImage(t)); err != nil {
		t.Fatal(err)
	}
	if err := ocigen.WriteLayoutTar(ctx, &escape, testOCIImage(t, ocigen.File("../../escape", 0o644, 0, 0, "x"))); err != nil {
		t.Fatal(err)
	}
	before := storeEntries(t)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"corrupt", bytes.Repeat([]byte("not a tar archive "), 100), "not a valid tar archive"},
		{"truncated", good.Bytes()[:good.Len()*2/3], "truncated"},
		{"dot dot", escape.Bytes(), `"../../escape"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "e2e-bad-" + randomHex(4)
			_, err := d.c.ImportImage(ctx, name, bytes.NewReader(tt.data), nil)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 400 || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("import %s: %v, want a 400 naming %q", tt.name, err, tt.want)
			}
			if strings.Contains(err.Error(), suite.imageDir) {
				t.Errorf("the error names the image store's host path: %v", err)
			}
			if _, err := d.c.GetImage(ctx, name); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("after a failed import, get %s: %v, want not found", name, err)
			}
		})
	}
	if after := storeEntries(t); after != before {
		t.Errorf("the image store changed: before %s, after %s", before, after)
	}
}

// storeEntries lists the image store's top-level entries.
func storeEntries(t *testing.T) string {
	ents, err := os.ReadDir(suite.imageDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// TestImageImportKilled: a daemon SIGKILLed while an upload streams in
// leaves its spool behind, and removes it when it starts again; no image
// of the name is made.
func TestImageImportKilled(t *testing.T) {
	d, err := startDaemon(filepath.Join(suite.tmp, "import-killed-"+randomHex(4)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	var archive bytes.Buffer
	if err := ocigen.WriteLayoutTar(context.Background(), &archive, testOCIImage(t)); err != nil {
		t.Fatal(err)
	}
	before := spools(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	name := "e2e-killed-" + randomHex(4)
	go d.c.ImportImage(context.Background(), name, pr, nil) // fails when the daemon dies
	go pw.Write(archive.Bytes()[:archive.Len()/2])          // then the upload stalls
	deadline := time.Now().Add(time.Minute)
	for len(spools(t)) <= len(before) {
		if time.Now().After(deadline) {
			t.Fatalf("no spool appeared in the image store; daemon log:\n%s", d.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.kill9()
	if len(spools(t)) <= len(before) {
		t.Fatal("the spool went with the daemon: nothing to check")
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	if got := spools(t); len(got) != len(before) {
		t.Errorf("after the restart the store holds the spools %v, want %v", got, before)
	}
	if _, err := d.c.GetImage(context.Background(), name); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get %s: %v, want not found", name, err)
	}
}

// spools lists the image store's upload spools.
func spools(t *testing.T) []string {
	var out []string
	for _, e := range strings.Fields(storeEntries(t)) {
		if strings.HasPrefix(e, ".spool-") {
			out = append(out, e)
		}
	}
	return out
}
