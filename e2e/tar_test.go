package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// gitRepo makes a git repository of about n files in nested directories,
// with an executable, a private file, symlinks and three commits.
func gitRepo(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=e2e", "-c", "user.email=e2e@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(dir, 0o755)
	git("init", "-q", "-b", "main")
	write := func(rel, content string, mode fs.FileMode) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	for commit := range 3 {
		for i := commit * n / 3; i < (commit+1)*n/3; i++ {
			write(fmt.Sprintf("src/pkg%02d/sub%d/file%04d.go", i%40, i%7, i), fmt.Sprintf("package p%d // %d\n%s", i, commit, strings.Repeat("x", i%3000)), 0o644)
		}
		write(fmt.Sprintf("bin/run%d.sh", commit), "#!/bin/sh\necho run\n", 0o755)
		git("add", "-A")
		git("commit", "-qm", fmt.Sprintf("commit %d", commit))
	}
	write("private.key", "secret\n", 0o600)
	os.Symlink("src/pkg01", filepath.Join(dir, "link-dir"))
	os.Symlink("../private.key", filepath.Join(dir, "bin", "link-file"))
	os.Symlink("/etc/hostname", filepath.Join(dir, "link-abs"))
	return dir
}

// manifest is a tree's every path with its type, mode and content hash
// or link target.
func manifest(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "symlink " + target
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = fmt.Sprintf("file %o %x", fi.Mode().Perm(), sha256.Sum256(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameManifest(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+": extra")
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s differs in %d paths (of %d), e.g.:\n%s", what, len(diffs), len(want), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
}

// tarDir streams dir's tree as a tar stream, made on the fly.
func tarDir(t *testing.T, dir string) io.ReadCloser {
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		defer root.Close()
		tw := tar.NewWriter(pw)
		err := fsutil.WriteTar(context.Background(), root, tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// TestTarTreeRoundTrip uploads a git repository of thousands of files, as
// a tar stream, through cove cp -r and through the API; git works on it
// in the sandbox, and both come back identical (or, committed to in the
// sandbox, a sound repository with the new commit). Under QEMU the tree
// has a few hundred files: each costs a TCG guest several emulated
// syscalls to write and git as many to check, and the path is the same.
func TestTarTreeRoundTrip(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	files := 3000
	if backend() == "qemu" {
		files = 400
	}
	repo := gitRepo(t, files)
	want := manifest(t, repo)
	home := t.TempDir()

	out := coveCLI(t, d, home, "cp", "-r", "--sandbox-token", sb.token, repo, sb.id+":repo-cli")
	if !strings.Contains(out, "uploaded") {
		t.Errorf("cove cp -r up:\n%s", out)
	}
	body := tarDir(t, repo)
	res, err := d.c.PutTar(ctx, sb.id, sb.token, "/work/repo-api", body, "")
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Files < int64(files) || res.Symlinks != 3 {
		t.Errorf("PutTar result %+v, want over %d files and 3 symlinks", res, files)
	}
	for _, r := range []string{"repo-cli", "repo-api"} {
		if got := execOK(t, d, sb, "git -C /work/"+r+" fsck --strict >/dev/null 2>&1 && git -C /work/"+r+" rev-list --count HEAD"); got != "3\n" {
			t.Errorf("git in the sandbox on %s: %q, want a sound repository of 3 commits", r, got)
		}
	}
	execOK(t, d, sb, `cd /work/repo-api && echo new > new.txt && git add -A && git -c user.name=sb -c user.email=sb@example.com commit -qm "in the sandbox" && git fsck --strict 2>&1`)

	back := filepath.Join(t.TempDir(), "back-cli")
	coveCLI(t, d, home, "cp", "-r", "--sandbox-token", sb.token, sb.id+":repo-cli", back)
	sameManifest(t, "cove cp -r back", manifest(t, back), want)

	rc, err := d.c.GetTar(ctx, sb.id, sb.token, "repo-api")
	if err != nil {
		t.Fatal(err)
	}
	backAPI := filepath.Join(t.TempDir(), "back-api")
	os.MkdirAll(backAPI, 0o755)
	root, _ := os.OpenRoot(backAPI)
	_, err = fsutil.ExtractTar(ctx, root, rc, nil)
	root.Close()
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := manifest(t, backAPI)
	for k, v := range want {
		if strings.HasPrefix(k, ".git") {
			continue // the sandbox's commit changed the repository's own files
		}
		if got[k] != v {
			t.Errorf("API round trip: %s = %q, want %q", k, got[k], v)
		}
	}
	cmd := exec.Command("sh", "-c", "git -C "+backAPI+" fsck --strict && git -C "+backAPI+" log --format=%s -1 && git -C "+backAPI+" rev-list --count HEAD")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "in the sandbox\n4") {
		t.Errorf("the repository committed to in the sandbox, back here: %v\n%s", err, out)
	}
}

// TestTarRefusesEscapes sends tar streams whose entries reach outside the
// target: each is refused with a 400 naming the entry, and nothing is
// written outside the target.
func TestTarRefusesEscapes(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx := context.Background()
	before := execOK(t, d, sb, "sha256sum /etc/passwd; ls /etc | wc -l")
	for _, tc := range []struct {
		name  string
		hdrs  []tar.Header
		entry string
	}{
		{"dotdot", []tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, "../x"},
		{"absolute", []tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, "/etc/x"},
		{"symlink out", []tar.Header{{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "link/passwd", Typeflag: tar.TypeReg}}, "link/passwd"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range tc.hdrs {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeReg {
				h.Size = 4
			}
			tw.WriteHeader(&h)
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte("evil"))
			}
		}
		tw.Close()
		_, err := d.c.PutTar(ctx, sb.id, sb.token, "/work/parent/target", &buf, "")
		if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.entry)) {
			t.Errorf("%s: %v, want a 400 naming %q", tc.name, err, tc.entry)
		}
	}
	if after := execOK(t, d, sb, "sha256sum /etc/passwd; ls /etc | wc -l"); after != before {
		t.Errorf("/etc changed: %q, then %q", before, after)
	}
	if out := execOK(t, d, sb, "ls -A /work/parent; test ! -e /etc/x && test ! -e /work/x && echo clean"); out != "target\nclean\n" {
		t.Errorf("outside the target: %q, want only target/ in its parent", out)
	}
	if _, err := d.c.GetTar(ctx, sb.id, sb.token, "/work/nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("GetTar of a missing dir: %v, want a 404", err)
	}
}

// TestGiBFileRoundTrip moves 1 GiB through the API both ways, streamed
// from and to a hash on this side: the sha256 is the same here and in the
// sandbox. (TestLargeFileRoundTrip checks memory stays flat.) Under QEMU
// the same path moves 128 MiB: a TCG guest hashes and copies a GiB in
// many minutes, and the size does not change what is exercised.
func TestGiBFileRoundTrip(t *testing.T) {
	d := suite.shared
	sb := create(t, d, apitype.CreateSandboxRequest{DiskMiB: 2048})[0]
	defer d.c.DeleteSandbox(context.Background(), sb.id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	size := int64(1 << 30)
	if backend() == "qemu" {
		size = 128 << 20
	}
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), size), h)
	info, err := d.c.PutFile(ctx, sb.id, sb.token, "/work/gib.bin", 0o644, src, size)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x", h.Sum(nil))
	if info.Size != size || info.SHA256 != want {
		t.Errorf("PutFile answered %+v, want size %d and sha256 %s", info, size, want)
	}
	// Hashing a GiB takes minutes in a TCG guest: longer than execOK waits.
	r, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{Shell: "sha256sum /work/gib.bin | cut -d' ' -f1", TimeoutSecs: 1200})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("sha256sum in the sandbox: %v, exit %d, %s", err, r.ExitCode, r.Stderr)
	}
	if strings.TrimSpace(r.Stdout) != want {
		t.Errorf("sha256 in the sandbox %q, want %s", r.Stdout, want)
	}
	rc, _, err := d.c.GetFile(ctx, sb.id, sb.token, "/work/gib.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h.Reset()
	n, err := io.Copy(h, rc)
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want {
		t.Errorf("downloaded sha256 %s, want %s", got, want)
	}
}

// TestTarAsUser: a tar upload as user makes every entry, and the target
// directory it makes, user's; an account the sandbox lacks is a 400.
func TestTarAsUser(t *testing.T) {
	d := suite.shared
	sb := newSandbox(t)
	ctx := context.Background()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Uid: 0})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f"})
	tw.Close()
	stream := buf.Bytes()
	if _, err := d.c.PutTar(ctx, sb.id, sb.token, "/work/mine/t", bytes.NewReader(stream), "user"); err != nil {
		t.Fatal(err)
	}
	if out := execOK(t, d, sb, "stat -c %u /work/mine /work/mine/t /work/mine/t/d /work/mine/t/d/f && stat -c %u -L /work/mine/t/l && stat -c %u /work/mine/t/l"); out != "1000\n1000\n1000\n1000\n1000\n1000\n" {
		t.Errorf("owners %q, want 1000 throughout", out)
	}
	if _, err := d.c.PutTar(ctx, sb.id, sb.token, "/work/x", bytes.NewReader(stream), "nobody-here"); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("tar as nobody-here: %v, want a 400", err)
	}
}
