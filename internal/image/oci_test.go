package image_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/image/ocigen"
)

// testImage has two layers: the second deletes a file of the first.
func testImage(t *testing.T, extra ...ocigen.Entry) v1.Image {
	t.Helper()
	l1, err := ocigen.LayerTar([]ocigen.Entry{
		ocigen.Dir("etc/", 0o755, 0, 0),
		ocigen.File("etc/passwd", 0o644, 0, 0, "root:x:0:0::/root:/bin/sh\n"),
		ocigen.Dir("data/", 0o755, 0, 0),
		ocigen.File("data/gone", 0o644, 0, 0, "deleted by layer 2"),
		ocigen.File("data/owned", 0o640, 1000, 1000, "uid 1000"),
	})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := ocigen.LayerTar(append([]ocigen.Entry{
		ocigen.Whiteout("data", "gone"),
		ocigen.File("data/run.sh", 0o755, 0, 0, "#!/bin/sh\necho hi\n"),
	}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	img, err := ocigen.Image(v1.Config{Env: []string{"A=1"}, WorkingDir: "/data", Cmd: []string{"sh"}}, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func agentFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "cove-agent")
	os.WriteFile(p, []byte("#!agent"), 0o755)
	return p
}

func TestImport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners need root")
	}
	ctx := context.Background()
	img := testImage(t)
	src := t.TempDir()
	docker := filepath.Join(src, "docker.tar")
	if err := ocigen.WriteDockerSave(docker, img); err != nil {
		t.Fatal(err)
	}
	var layoutTar bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &layoutTar, img); err != nil {
		t.Fatal(err)
	}
	agent := agentFile(t)
	for _, tc := range []struct {
		name string
		o    image.ImportOptions
	}{
		{"docker save", image.ImportOptions{Archive: docker}},
		{"layout upload", image.ImportOptions{Reader: bytes.NewReader(layoutTar.Bytes())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := tc.o
			o.Name, o.Agent = "imp", agent
			got, err := image.Import(ctx, dir, o)
			if err != nil {
				t.Fatal(err)
			}
			r := got.Rootfs
			if _, err := os.Lstat(filepath.Join(r, "data/gone")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("whiteout not applied: %v", err)
			}
			fi, err := os.Stat(filepath.Join(r, "data/owned"))
			if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 || fi.Mode().Perm() != 0o640 {
				t.Errorf("data/owned: %v %v", fi, err)
			}
			if fi, err := os.Stat(filepath.Join(r, "data/run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("data/run.sh: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(r, image.AgentPath)); err != nil || string(b) != "#!agent" {
				t.Errorf("agent: %q %v", b, err)
			}
			if c := got.Manifest.Config; c == nil || c.WorkingDir != "/data" || len(c.Env) != 1 {
				t.Errorf("config %+v", c)
			}
			res, err := image.Resolve(dir, "imp")
			if err != nil || res.ID != got.ID || !strings.HasPrefix(got.Manifest.Source, "archive ") {
				t.Errorf("resolve %+v %v", res, err)
			}
			// The same image again: the same id, nothing rebuilt.
			o.Reader = nil
			if o.Archive == "" {
				p := filepath.Join(t.TempDir(), "layout.tar")
				os.WriteFile(p, layoutTar.Bytes(), 0o644)
				o.Archive = p
			}
			again, err := image.Import(ctx, dir, o)
			if err != nil || again.ID != got.ID {
				t.Errorf("reimport %s %v, want %s", again.ID, err, got.ID)
			}
		})
	}
}

// TestImportBad: each bad archive is refused by name, and leaves nothing.
func TestImportBad(t *testing.T) {
	ctx := context.Background()
	var good bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &good, testImage(t)); err != nil {
		t.Fatal(err)
	}
	var escape bytes.Buffer
	bad := ocigen.File("../escape", 0o644, 0, 0, "x")
	if err := ocigen.WriteLayoutTar(ctx, &escape, testImage(t, bad)); err != nil {
		t.Fatal(err)
	}
	var link bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &link, testImage(t, ocigen.Symlink("etc/sudoers.d", "/etc"))); err != nil {
		t.Fatal(err)
	}
	var passwd bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &passwd, testImage(t, ocigen.Symlink("etc/passwd", "/etc/shadow"))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), "not a valid tar"},
		{"truncated", good.Bytes()[:good.Len()/2], "truncated"},
		{"dot dot", escape.Bytes(), `"../escape"`},
		{"symlinked etc dir", link.Bytes(), "/etc/sudoers.d is a symlink"},
		{"symlinked passwd", passwd.Bytes(), "/etc/passwd is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := image.Import(ctx, dir, image.ImportOptions{Name: "bad", Reader: bytes.NewReader(tt.data), Agent: agentFile(t)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), dir) {
				t.Errorf("error names the store's path: %v", err)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Name() != ".lock" {
					t.Errorf("left behind: %s", e.Name())
				}
			}
		})
	}
}

func TestImportTooLarge(t *testing.T) {
	dir := t.TempDir()
	_, err := image.Import(context.Background(), dir, image.ImportOptions{Name: "big", Reader: bytes.NewReader(make([]byte, 4096)), Agent: agentFile(t), MaxBytes: 1024})
	if err == nil || !strings.Contains(err.Error(), "size limit") {
		t.Fatalf("err %v", err)
	}
}

// TestImportRef pulls from a registry (go-containerregistry's own, in
// memory, over plain HTTP on the loopback).
func TestImportRef(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners need root")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/cove/test:1"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, testImage(t)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var prog bytes.Buffer
	got, err := image.Import(context.Background(), dir, image.ImportOptions{Name: "pulled", Ref: ref, Agent: agentFile(t), Progress: &prog})
	if err != nil {
		t.Fatalf("%v\n%s", err, prog.String())
	}
	if got.Manifest.Source != "ref "+ref || !strings.Contains(prog.String(), "layer 2/2") {
		t.Errorf("source %q, progress:\n%s", got.Manifest.Source, prog.String())
	}
	if _, err := os.Lstat(filepath.Join(got.Rootfs, "data/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("whiteout not applied: %v", err)
	}
	_, err = image.Import(context.Background(), dir, image.ImportOptions{Name: "nope", Ref: strings.TrimPrefix(srv.URL, "http://") + "/cove/missing:1", Agent: agentFile(t)})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("pull of a missing image: %v", err)
	}
}

// TestCleanStale removes a killed import's work, and leaves images.
func TestCleanStale(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o644)
	os.MkdirAll(filepath.Join(dir, ".tmp-import-123", "x"), 0o755)
	os.MkdirAll(filepath.Join(dir, "img-0123456789ab", "rootfs"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".spool-dead"), 0o755)
	os.WriteFile(filepath.Join(dir, ".spool-dead", ".lock"), nil, 0o600)
	os.MkdirAll(filepath.Join(dir, ".spool-live"), 0o755)
	live, _ := os.Create(filepath.Join(dir, ".spool-live", ".lock"))
	defer live.Close()
	syscall.Flock(int(live.Fd()), syscall.LOCK_EX)
	if err := image.CleanStale(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".spool-dead")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dead spool kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".spool-live")); err != nil {
		t.Errorf("live spool removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-import-123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "img-0123456789ab")); err != nil {
		t.Errorf("image removed: %v", err)
	}
}

func TestRefName(t *testing.T) {
	for ref, want := range map[string]string{
		"docker.io/library/alpine:3.20":      "docker.io_library_alpine_3.20",
		"localhost:5000/cove/test@sha256:ab": "localhost_5000_cove_test_sha256_ab",
		".hidden":                            "hidden",
	} {
		if got := image.RefName(ref); got != want {
			t.Errorf("RefName(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestPuller imports a registry image once and finds it by its name after.
func TestPuller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners need root")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/cove/from:1"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, testImage(t)); err != nil {
		t.Fatal(err)
	}
	agent := agentFile(t)
	pulls := 0
	p := image.Puller{Dir: t.TempDir(), Agent: func() (string, error) { pulls++; return agent, nil }}
	for range 2 {
		n, err := p.Pull(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := image.Resolve(p.Dir, n); err != nil {
			t.Fatalf("pulled %q: %v", n, err)
		}
	}
	if pulls != 1 {
		t.Errorf("pulled %d times, want once", pulls)
	}
}
