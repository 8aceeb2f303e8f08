package qemu

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

func TestDiskSize(t *testing.T) {
	// An ext4 image of 1000 4-KiB blocks, 100 of them free, in a file of
	// its size.
	ext4 := func(t *testing.T, blocks, free uint32) string {
		sb := make([]byte, 1024)
		le := binary.LittleEndian
		le.PutUint32(sb[0x04:], blocks)
		le.PutUint32(sb[0x0c:], free)
		le.PutUint32(sb[0x18:], 2) // 1 KiB << 2
		le.PutUint16(sb[0x38:], 0xef53)
		le.PutUint32(sb[0x60:], 0x80) // 64bit, high halves zero
		path := filepath.Join(t.TempDir(), "rootfs.ext4")
		img := make([]byte, 2048)
		copy(img[1024:], sb)
		if err := os.WriteFile(path, img, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, int64(blocks)*4096); err != nil {
			t.Fatal(err)
		}
		return path
	}
	raw := filepath.Join(t.TempDir(), "raw")
	if err := os.WriteFile(raw, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		base    string
		diskMiB int
		want    int64
	}{
		{"no disk size: the base", ext4(t, 1000, 100), 0, 1000 * 4096},
		{"what the image uses plus the disk", ext4(t, 1000, 100), 64, 900*4096 + 64<<20},
		{"never less than the base", ext4(t, 100000, 90000), 1, 100000 * 4096},
		{"not ext4: the disk on top", raw, 64, 4096 + 64<<20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := diskSize(tc.base, tc.diskMiB)
			if err != nil || got != tc.want {
				t.Errorf("diskSize = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
