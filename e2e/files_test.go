package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestLargeFileRoundTrip moves 200 MiB of random bytes in and out and
// checks that the daemon streams rather than buffers them. Meanwhile a
// client that sent half a request body is cut off: the body timeout bounds
// stalls, not long transfers.
func TestLargeFileRoundTrip(t *testing.T) {
	d := suite.shared
	sb := create(t, d, apitype.CreateSandboxRequest{MemoryMiB: 1024})[0]
	defer d.c.DeleteSandbox(context.Background(), sb.id)
	ctx := context.Background()
	stalled := stallBody(t, d, sb)
	defer stalled.check(t, d)

	const size = 200 << 20
	src := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := h.Sum(nil)

	hwmBefore := peakRSS(t, d.cmd.Process.Pid)
	f, _ = os.Open(src)
	info, err := d.c.PutFile(ctx, sb.id, sb.token, "/work/big.bin", 0o600, f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != size || info.Mode != "0600" {
		t.Fatalf("uploaded file info %+v", info)
	}
	if out := execOK(t, d, sb, "sha256sum /work/big.bin | cut -d' ' -f1"); strings.TrimSpace(out) != hexString(want) {
		t.Fatalf("sha256 inside the sandbox %q, want %x", out, want)
	}
	rc, _, err := d.c.GetFile(ctx, sb.id, sb.token, "/work/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	h.Reset()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		t.Fatalf("downloaded sha256 %x, want %x", got, want)
	}
	grew := peakRSS(t, d.cmd.Process.Pid) - hwmBefore
	t.Logf("daemon peak RSS grew %d MiB moving %d MiB each way", grew>>20, size>>20)
	if grew > 64<<20 {
		t.Fatalf("daemon peak RSS grew %d MiB moving a %d MiB file: it buffers", grew>>20, size>>20)
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// peakRSS returns a process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestFilePathsStayInside tries to read and write host files through the
// file API: with ../, absolute paths and symlinks made inside the sandbox.
// It then checks the host side: nothing was read, written or changed,
// including the shared image.
func TestFilePathsStayInside(t *testing.T) {
	d, sb := suite.shared, newSandbox(t)
	ctx := context.Background()
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "secret")
	os.WriteFile(secret, []byte("HOST SECRET"), 0o600)
	evil := filepath.Join(hostDir, "evil")

	// Reads.
	for _, p := range []string{"../../../../" + secret, secret, "/work/../" + secret} {
		rc, _, err := d.c.GetFile(ctx, sb.id, sb.token, p)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if bytes.Contains(b, []byte("HOST SECRET")) {
				t.Fatalf("read the host secret through %q", p)
			}
		}
	}
	execOK(t, d, sb, "ln -s "+secret+" /work/link-secret && ln -s / /work/root && ln -s "+evil+" /work/link-evil")
	for _, p := range []string{"/work/link-secret", "/work/root" + secret} {
		rc, _, err := d.c.GetFile(ctx, sb.id, sb.token, p)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if bytes.Contains(b, []byte("HOST SECRET")) {
				t.Fatalf("read the host secret through symlink %q", p)
			}
		}
	}

	// Writes.
	for _, p := range []string{"../../../../" + evil, evil, "/work/link-evil", "/work/root" + evil, "/work/link-secret"} {
		d.c.PutFile(ctx, sb.id, sb.token, p, 0o644, strings.NewReader("PWNED"), 5)
	}
	status, _ := rawCall(t, "PUT", d.url+"/sandboxes/"+sb.id+"/files/..%2F..%2F..%2F..%2F"+strings.TrimPrefix(evil, "/"),
		map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: sb.token}, "PWNED")
	if status < 300 {
		t.Errorf("compat PUT with ../ answered %d, want an error", status)
	}
	if _, err := os.Stat(evil); err == nil {
		t.Fatalf("a sandbox wrote the host file %s", evil)
	}
	if b, _ := os.ReadFile(secret); string(b) != "HOST SECRET" {
		t.Fatalf("host secret changed: %q", b)
	}
	// The writes landed inside the sandbox, not in the shared image.
	img, err := image.Resolve(suite.imageDir, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{evil, "/work/link-evil", "/work/root", "/work/link-secret"} {
		if _, err := os.Lstat(filepath.Join(img.Rootfs, p)); err == nil {
			t.Fatalf("the shared image changed: %s exists in it", p)
		}
	}
	if out := execOK(t, d, sb, "cat "+evil); out != "PWNED" {
		t.Fatalf("the absolute-path write should land inside the sandbox, got %q", out)
	}
}
