package qemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// diskSize is the virtual size of a cold VM's disk over the image's raw
// disk base, for a sandbox that may write diskMiB: the blocks the image's
// ext4 filesystem uses plus diskMiB, and never less than the base. The
// guest's agent grows the filesystem to the disk, so what it has free is
// diskMiB (or the base's own slack, when that is more). A base that is
// not ext4 gets diskMiB on top of its size.
func diskSize(base string, diskMiB int) (int64, error) {
	fi, err := os.Stat(base)
	if err != nil {
		return 0, err
	}
	if diskMiB <= 0 {
		return fi.Size(), nil
	}
	extra := int64(diskMiB) << 20
	used, err := ext4Used(base)
	if err != nil {
		return fi.Size() + extra, nil
	}
	return max(fi.Size(), used+extra), nil
}

// ext4Used reads the bytes in use in the ext4 filesystem in file path
// from its superblock, which is exact for a filesystem not mounted.
func ext4Used(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return 0, err
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != 0xef53 {
		return 0, errors.New("not ext4")
	}
	blocks, free := uint64(le.Uint32(sb[0x04:])), uint64(le.Uint32(sb[0x0c:]))
	if le.Uint32(sb[0x60:])&0x80 != 0 { // INCOMPAT_64BIT: the counts' high halves
		blocks |= uint64(le.Uint32(sb[0x150:])) << 32
		free |= uint64(le.Uint32(sb[0x158:])) << 32
	}
	logSize := le.Uint32(sb[0x18:])
	if free > blocks || logSize > 6 {
		return 0, fmt.Errorf("implausible ext4 superblock: %d of %d blocks free, block size 2^%d KiB", free, blocks, logSize)
	}
	return int64(blocks-free) * (1024 << logSize), nil
}
