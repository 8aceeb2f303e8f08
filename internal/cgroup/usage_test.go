package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadV2(t *testing.T) {
	d := t.TempDir()
	write(t, filepath.Join(d, "cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\n")
	write(t, filepath.Join(d, "memory.current"), "1048576\n")
	write(t, filepath.Join(d, "memory.peak"), "2097152\n")
	write(t, filepath.Join(d, "pids.current"), "7\n")
	write(t, filepath.Join(d, "io.stat"), "8:0 rbytes=10 wbytes=100 rios=1 wios=2\n8:16 rbytes=0 wbytes=23\n")
	got := readV2(d)
	want := Usage{CPUSeconds: 2.5, MemoryBytes: 1 << 20, MemoryPeakBytes: 2 << 20, DiskWriteBytes: 123, Pids: 7}
	if got != want {
		t.Fatalf("readV2 = %+v, want %+v", got, want)
	}
}

func TestReadV1(t *testing.T) {
	root := t.TempDir()
	dir := func(c string) string { return filepath.Join(root, c) }
	tests := []struct {
		name    string
		files   map[string]string
		want    Usage
		wantErr bool
	}{
		{"none", nil, Usage{}, true},
		{"gvisor", map[string]string{
			"cpuacct/cpuacct.usage":                 "3000000000\n",
			"memory/memory.usage_in_bytes":          "4096\n",
			"memory/memory.max_usage_in_bytes":      "8192\n",
			"pids/pids.current":                     "3\n",
			"blkio/blkio.throttle.io_service_bytes": "8:0 Read 5\n8:0 Write 50\n8:0 Total 55\nTotal 55\n",
		}, Usage{CPUSeconds: 3, MemoryBytes: 4096, MemoryPeakBytes: 8192, Pids: 3, DiskWriteBytes: 50}, false},
		{"qemu: cpu from the processes, tasks counted", map[string]string{
			"cpu/cgroup.procs":             "", // no live process: 0 s
			"cpu/tasks":                    "11\n12\n13\n",
			"memory/memory.usage_in_bytes": "100\n",
		}, Usage{MemoryBytes: 100, Pids: 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.RemoveAll(root)
			for f, c := range tt.files {
				write(t, filepath.Join(root, f), c)
			}
			got, err := readV1(dir)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("readV1 = %+v, %v; want %+v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestStatTicks(t *testing.T) {
	tests := []struct {
		stat string
		want int64
	}{
		{"1234 (qemu-system-x86) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0", 200},
		{"1234 (a b) c)) R 1 2 3 4 5 6 7 8 9 10 1 2 0 0", 3},
		{"garbage", 0},
	}
	for _, tt := range tests {
		if got := statTicks(tt.stat); got != tt.want {
			t.Errorf("statTicks(%q) = %d, want %d", tt.stat, got, tt.want)
		}
	}
}
