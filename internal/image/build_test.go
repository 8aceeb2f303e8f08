package image

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const fakeStatus = `Package: python3
Status: install ok installed
Version: 3.11.2-1+b1

Package: nodejs
Status: deinstall ok config-files
Version: 18.19.0+dfsg-6~deb12u2

Package: git
Status: install ok installed
Version: 1:2.39.5-0+deb12u2
`

// fakeBase stands in for debootstrap: a tiny rootfs, including an agent
// file that the image build must replace without touching, and a resolv.conf
// symlink into the "host" that must not be followed.
type fakeBase struct {
	calls    atomic.Int32
	hostFile string // what the rootfs's resolv.conf symlink points at
	delay    time.Duration
	err      error
}

func (f *fakeBase) build(ctx context.Context, b *builder, r recipe, rootfs string, out *outputSink) error {
	f.calls.Add(1)
	files := map[string]string{
		"usr/bin/python3":          "fake python",
		"usr/local/bin/cove-agent": "OLD AGENT",
		"var/lib/dpkg/status":      fakeStatus,
		"etc/debian_version":       "12.11\n",
		"etc/hostname":             "buildhost\n",
	}
	for p, c := range files {
		p = filepath.Join(rootfs, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return err
		}
	}
	if f.hostFile != "" {
		if err := os.Symlink(f.hostFile, filepath.Join(rootfs, "etc/resolv.conf")); err != nil {
			return err
		}
	}
	out.Write([]byte("I: fake base\n"))
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.err
}

type env struct {
	dir   string
	agent string
	base  *fakeBase
}

func newEnv(t *testing.T) *env {
	t.Helper()
	tmp := t.TempDir()
	e := &env{
		dir:   filepath.Join(tmp, "images"),
		agent: filepath.Join(tmp, "cove-agent"),
		base:  &fakeBase{hostFile: filepath.Join(tmp, "host-resolv.conf")},
	}
	mustWrite(t, e.base.hostFile, "nameserver 192.0.2.1\n")
	e.setAgent(t, "agent v1")
	return e
}

func (e *env) setAgent(t *testing.T, content string) { mustWrite(t, e.agent, content) }

func (e *env) build(t *testing.T, ctx context.Context) (Image, error) {
	t.Helper()
	var prog bytes.Buffer
	img, err := Build(ctx, BuildOptions{Dir: e.dir, AgentPath: e.agent, Progress: &prog, buildBase: e.base.build})
	t.Logf("progress:\n%s", prog.String())
	return img, err
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tmpEntries lists .tmp- leftovers in dir and dir/base.
func tmpEntries(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	for _, d := range []string{dir, filepath.Join(dir, "base")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				left = append(left, filepath.Join(d, e.Name()))
			}
		}
	}
	return left
}

func TestBuild(t *testing.T) {
	e := newEnv(t)
	img, err := e.build(t, t.Context())
	if err != nil {
		t.Fatal(err)
	}
	baseKey := defaultRecipe().key()
	wantID := "default-" + imageKey(baseKey, []byte("agent v1"))[:12]
	if img.ID != wantID || img.Name != DefaultName || !img.Current {
		t.Errorf("got id %q name %q current %v, want %q default true", img.ID, img.Name, img.Current, wantID)
	}
	if img.Rootfs != filepath.Join(e.dir, wantID, "rootfs") {
		t.Errorf("rootfs %q", img.Rootfs)
	}
	baseRoot := filepath.Join(e.dir, "base", baseKey, "rootfs")

	// The agent is new in the image; the base's file is untouched.
	agentPath := filepath.Join(img.Rootfs, AgentPath)
	if got := mustRead(t, agentPath); got != "agent v1" {
		t.Errorf("image agent = %q", got)
	}
	if fi, err := os.Stat(agentPath); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("agent mode: %v %v", fi, err)
	}
	if got := mustRead(t, filepath.Join(baseRoot, AgentPath)); got != "OLD AGENT" {
		t.Errorf("base agent changed to %q", got)
	}
	// Everything else is shared by hard link.
	a, _ := os.Stat(filepath.Join(baseRoot, "usr/bin/python3"))
	b, _ := os.Stat(filepath.Join(img.Rootfs, "usr/bin/python3"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("usr/bin/python3 is not a hard link of the base's")
	}

	// Recipe files and mountpoints, and no write through the symlink.
	if got := mustRead(t, filepath.Join(img.Rootfs, "etc/hostname")); got != "sandbox\n" {
		t.Errorf("hostname %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(img.Rootfs, "etc/resolv.conf")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("resolv.conf: %v %v", fi, err)
	}
	// The layer's resolver is the image's own file, not the base's.
	if got := mustRead(t, filepath.Join(img.Rootfs, "etc/resolv.conf")); got != "nameserver 10.77.0.1\n" {
		t.Errorf("image resolv.conf %q", got)
	}
	if got := mustRead(t, filepath.Join(baseRoot, "etc/resolv.conf")); !strings.HasPrefix(got, "# cove") {
		t.Errorf("base resolv.conf changed to %q", got)
	}
	if got := mustRead(t, e.base.hostFile); got != "nameserver 192.0.2.1\n" {
		t.Errorf("host file written through symlink: %q", got)
	}
	if got := mustRead(t, filepath.Join(img.Rootfs, "etc/machine-id")); got != "" {
		t.Errorf("machine-id %q", got)
	}
	for _, d := range defaultRecipe().Dirs {
		fi, err := os.Lstat(filepath.Join(img.Rootfs, d.Path))
		if err != nil || !fi.IsDir() || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != d.Mode {
			t.Errorf("%s: %v %v, want dir %v", d.Path, fi.Mode(), err, d.Mode)
		}
	}

	m := img.Manifest
	if m.ID != img.ID || m.BaseKey != baseKey || m.AgentSHA256 != sha256Hex([]byte("agent v1")) || m.Suite != Suite {
		t.Errorf("manifest %+v", m)
	}
	if m.Packages["python3"] != "3.11.2-1+b1" || m.Packages["git"] != "1:2.39.5-0+deb12u2" || m.Packages["nodejs"] != "" {
		t.Errorf("manifest packages %v", m.Packages)
	}
	if m.Debian != "12.11" || m.SizeBytes <= 0 || m.Created.IsZero() {
		t.Errorf("manifest %+v", m)
	}
	if got := strings.TrimSpace(mustRead(t, filepath.Join(e.dir, "default.current"))); got != img.ID {
		t.Errorf("default.current = %q", got)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "base", baseKey, "build.log")); err != nil {
		t.Errorf("base build log: %v", err)
	}
	if left := tmpEntries(t, e.dir); len(left) > 0 {
		t.Errorf("leftovers: %v", left)
	}
	got, err := Resolve(e.dir, "")
	if err != nil || got.ID != img.ID || !got.Current {
		t.Errorf("Resolve(default) = %+v, %v", got, err)
	}
}

func TestBuildUnchangedIsNoop(t *testing.T) {
	e := newEnv(t)
	first, err := e.build(t, t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second, err := e.build(t, t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("no-op rebuild took %v", d)
	}
	if second.ID != first.ID || !second.Manifest.Created.Equal(first.Manifest.Created) {
		t.Errorf("rebuild made a new image: %s %v vs %s %v", second.ID, second.Manifest.Created, first.ID, first.Manifest.Created)
	}
	if n := e.base.calls.Load(); n != 1 {
		t.Errorf("base built %d times, want 1", n)
	}
}

func TestBuildNewAgent(t *testing.T) {
	e := newEnv(t)
	v1, err := e.build(t, t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e.setAgent(t, "agent v2")
	v2, err := e.build(t, t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v1.ID == v2.ID {
		t.Fatalf("same id %s for different agents", v1.ID)
	}
	if v1.Manifest.BaseKey != v2.Manifest.BaseKey || e.base.calls.Load() != 1 {
		t.Errorf("base not reused: %s vs %s, %d builds", v1.Manifest.BaseKey, v2.Manifest.BaseKey, e.base.calls.Load())
	}
	// The old image survives intact and is no longer current.
	if got := mustRead(t, filepath.Join(v1.Rootfs, AgentPath)); got != "agent v1" {
		t.Errorf("old image's agent = %q", got)
	}
	imgs, err := List(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	cur := map[string]bool{}
	for _, img := range imgs {
		cur[img.ID] = img.Current
	}
	if len(imgs) != 2 || cur[v1.ID] || !cur[v2.ID] {
		t.Errorf("List: %v", cur)
	}

	// Building v1 again is a no-op that makes it current again.
	e.setAgent(t, "agent v1")
	again, err := e.build(t, t.Context())
	if err != nil || again.ID != v1.ID {
		t.Fatalf("rebuild v1: %v %v", again.ID, err)
	}
	if r, err := Resolve(e.dir, DefaultName); err != nil || r.ID != v1.ID {
		t.Errorf("Resolve after rebuild = %v %v", r.ID, err)
	}
}

func TestBuildFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.base.err = errors.New("mirror unreachable")
	_, err := e.build(t, t.Context())
	if err == nil || !strings.Contains(err.Error(), "mirror unreachable") {
		t.Fatalf("err = %v", err)
	}
	if left := tmpEntries(t, e.dir); len(left) > 0 {
		t.Errorf("leftovers: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "base")); len(ents) != 1 || ents[0].Name() != "failed-build.log" {
		t.Errorf("base dir: %v", ents)
	}
	if _, err := Resolve(e.dir, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve = %v, want ErrNotFound", err)
	}

	e.base.err = nil
	if _, err := e.build(t, t.Context()); err != nil {
		t.Errorf("retry: %v", err)
	}
}

func TestBuildCancel(t *testing.T) {
	e := newEnv(t)
	e.base.delay = time.Minute
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := e.build(t, ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if left := tmpEntries(t, e.dir); len(left) > 0 {
		t.Errorf("leftovers: %v", left)
	}
}

func TestBuildRemovesStaleTmp(t *testing.T) {
	e := newEnv(t)
	stale := []string{
		filepath.Join(e.dir, ".tmp-default-123abc-999/rootfs/etc"),
		filepath.Join(e.dir, "base", ".tmp-0123456789ab-42/rootfs/usr"),
	}
	for _, d := range stale {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(e.dir, ".tmp-default.current-77"), "half")
	if _, err := e.build(t, t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := tmpEntries(t, e.dir); len(left) > 0 {
		t.Errorf("stale leftovers: %v", left)
	}
}

func TestBuildConcurrent(t *testing.T) {
	e := newEnv(t)
	e.base.delay = 200 * time.Millisecond
	var wg sync.WaitGroup
	ids := make([]string, 3)
	errs := make([]error, 3)
	for i := range ids {
		wg.Go(func() {
			img, err := Build(t.Context(), BuildOptions{Dir: e.dir, AgentPath: e.agent, buildBase: e.base.build})
			ids[i], errs[i] = img.ID, err
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Errorf("build %d: %s %v", i, ids[i], errs[i])
		}
	}
	if n := e.base.calls.Load(); n != 1 {
		t.Errorf("base built %d times, want 1", n)
	}
}

func TestBuildBadOptions(t *testing.T) {
	e := newEnv(t)
	empty := filepath.Join(t.TempDir(), "empty")
	mustWrite(t, empty, "")
	tests := []struct {
		name string
		opts BuildOptions
	}{
		{"no agent", BuildOptions{Dir: e.dir}},
		{"missing agent", BuildOptions{Dir: e.dir, AgentPath: filepath.Join(e.dir, "nope")}},
		{"empty agent", BuildOptions{Dir: e.dir, AgentPath: empty}},
		{"bad name", BuildOptions{Dir: e.dir, AgentPath: e.agent, Name: "../etc"}},
		{"dot name", BuildOptions{Dir: e.dir, AgentPath: e.agent, Name: ".hidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.buildBase = e.base.build
			if _, err := Build(t.Context(), tt.opts); err == nil {
				t.Error("no error")
			}
		})
	}
	if n := e.base.calls.Load(); n != 0 {
		t.Errorf("base built %d times", n)
	}
}
