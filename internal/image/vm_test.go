package image

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
)

func TestExtractVmlinux(t *testing.T) {
	exe, err := os.Executable() // an x86-64 ELF to stand in for vmlinux
	if err != nil {
		t.Fatal(err)
	}
	elfData, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !completeELF(elfData) {
		t.Skip("test binary is not an x86-64 ELF")
	}
	var z bytes.Buffer
	w := lz4.NewWriter(&z)
	if err := w.Apply(lz4.LegacyOption(true)); err != nil {
		t.Fatal(err)
	}
	w.Write(elfData)
	w.Close()
	// A bzImage: setup code (with a decoy magic), the payload, then the
	// size trailer and more code.
	bz := append([]byte("setup\x02\x21\x4c\x18junk"), z.Bytes()...)
	bz = append(bz, []byte("\x00\x10\x00\x00trailing code")...)
	got, err := extractVmlinux(bz)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, elfData) {
		t.Fatalf("extracted %d bytes, want the %d-byte ELF", len(got), len(elfData))
	}
	if _, err := extractVmlinux([]byte("no payload here")); err == nil {
		t.Fatal("extracted a kernel from nothing")
	}
}

// readCPIO parses a gzipped newc archive into name -> entry.
func readCPIO(t *testing.T, data []byte) map[string]cpioEntry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cpioEntry{}
	align := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		h := raw[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic at %d", off)
		}
		field := func(i int) int {
			v, _ := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			return int(v)
		}
		mode, size, nameLen := field(1), field(6), field(11)
		name := string(raw[off+110 : off+110+nameLen-1])
		off = align(off + 110 + nameLen)
		if name == "TRAILER!!!" {
			return out
		}
		out[name] = cpioEntry{Name: name, Mode: uint32(mode), Data: raw[off : off+size]}
		off = align(off + size)
	}
}

func TestInitrd(t *testing.T) {
	mods := t.TempDir()
	for _, m := range append(slices.Clone(GuestModules), "overlay", "unrelated") {
		d := filepath.Join(mods, "kernel", "drivers", m)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, m+".ko"), []byte("module "+m), 0o644)
	}
	ents, order, err := initrdEntries([]byte("BUSYBOX"), mods)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(GuestModules), "overlay"); !slices.Equal(order, want) {
		t.Fatalf("module order %v, want %v", order, want)
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, ents); err != nil {
		t.Fatal(err)
	}
	files := readCPIO(t, buf.Bytes())
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"bin", "bin/busybox", "dev", "init", "lib", "lib/modules"}
	for _, m := range order {
		want = append(want, "lib/modules/"+m+".ko")
	}
	want = append(want, "newroot", "proc", "sys")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("initrd holds %v\nwant %v", names, want)
	}
	if string(files["bin/busybox"].Data) != "BUSYBOX" || files["init"].Mode != cpioFile|0o755 {
		t.Fatalf("busybox or init wrong: %+v", files["init"].Mode)
	}
	init := string(files["init"].Data)
	for _, s := range []string{
		"for m in " + strings.Join(order, " ") + ";",
		"ip addr add 10.77.0.2/30 dev eth0",
		"mount -t ext4 -o noatime,no_prefetch_block_bitmaps,noinit_itable /dev/vda /newroot",
		"switch_root /newroot /usr/local/bin/cove-agent",
	} {
		if !strings.Contains(init, s) {
			t.Errorf("/init lacks %q", s)
		}
	}
	// A kernel without a needed module is refused.
	os.RemoveAll(filepath.Join(mods, "kernel", "drivers", "virtio_net"))
	if _, _, err := initrdEntries(nil, mods); err == nil {
		t.Fatal("initrd without virtio_net accepted")
	}
}

// TestPinnedKernel: the pin names one cloud kernel at one version with a
// SHA-256, and a .deb is accepted only with that digest.
func TestPinnedKernel(t *testing.T) {
	kp := pinnedKernel()
	if !regexp.MustCompile(`^linux-image-[0-9.]+-[0-9]+-cloud-amd64-unsigned$`).MatchString(kp.Name) ||
		!regexp.MustCompile(`^[0-9][0-9a-z.+~-]*$`).MatchString(kp.Version) ||
		!regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(kp.SHA256) {
		t.Fatalf("malformed pin %+v", kp)
	}
	dir := t.TempDir()
	deb := filepath.Join(dir, "k.deb")
	os.WriteFile(deb, []byte("a kernel package"), 0o644)
	sum := sha256.Sum256([]byte("a kernel package"))
	good := kernelPackage{Name: kp.Name, Version: kp.Version, SHA256: hex.EncodeToString(sum[:])}
	for _, tc := range []struct {
		name string
		path string
		kp   kernelPackage
		want error // nil: accepted
	}{
		{"matching digest", deb, good, nil},
		{"upper-case pin", deb, kernelPackage{Name: kp.Name, SHA256: strings.ToUpper(good.SHA256)}, nil},
		{"another package", deb, kp, ErrKernelDigest},
		{"empty pin", deb, kernelPackage{Name: kp.Name}, ErrKernelDigest},
		{"missing file", filepath.Join(dir, "none.deb"), good, fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkKernelDeb(tc.path, tc.kp)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("checkKernelDeb = %v, want %v", err, tc.want)
			}
			if errors.Is(err, ErrKernelDigest) && !strings.Contains(err.Error(), good.SHA256) {
				t.Errorf("the error does not name the digest found: %v", err)
			}
		})
	}
}

func TestVMFilesFor(t *testing.T) {
	v := VMFilesFor("/images/default-abc/rootfs")
	if v.Kernel != "/images/default-abc/vm/vmlinux" || v.Disk != "/images/default-abc/vm/rootfs.ext4" || v.Exists() {
		t.Fatalf("%+v", v)
	}
}

func TestPadInitrd(t *testing.T) {
	for _, n := range []int{1, 1128, 3812, 4092, 4096, 4100, 1421028} {
		b := bytes.NewBuffer(bytes.Repeat([]byte{0xab}, n))
		padInitrd(b)
		got := b.Bytes()
		if len(got)%4096 != 4 || len(got) <= n {
			t.Errorf("size %d: padded to %d, want 4 past a page boundary", n, len(got))
		}
		if !bytes.Equal(got[:n], bytes.Repeat([]byte{0xab}, n)) || bytes.Count(got[n:], []byte{0}) != len(got)-n {
			t.Errorf("size %d: content changed or padding not zero", n)
		}
	}
}
