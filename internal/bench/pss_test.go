package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleRollup = `55d7c3a1e000-7ffc4b5f8000 ---p 00000000 00:00 0                          [rollup]
Rss:               48712 kB
Pss:               21034 kB
Pss_Dirty:         17000 kB
Pss_Anon:          16800 kB
Pss_File:           4234 kB
Pss_Shmem:             0 kB
Shared_Clean:       8012 kB
`

func TestParsePss(t *testing.T) {
	got, err := parsePss([]byte(sampleRollup))
	if err != nil || got != 21034 {
		t.Errorf("parsePss = %d, %v; want 21034", got, err)
	}
	for _, bad := range []string{"", "Rss: 5 kB\n", "Pss_Anon: 5 kB\n", "Pss: lots\n", "Pss: 5 MB\n"} {
		if _, err := parsePss([]byte(bad)); err == nil {
			t.Errorf("parsePss(%q) succeeded", bad)
		}
	}
}

// runscCmdline is how the daemon's runsc processes name a sandbox.
func runscCmdline(id string) string {
	return strings.Join([]string{"runsc-sandbox", "--root=/var/lib/cove/sandboxes/.runsc",
		"--log=/var/lib/cove/sandboxes/" + id + "/runsc.log", "boot",
		"--bundle=/var/lib/cove/sandboxes/" + id + "/bundle", id}, "\x00") + "\x00"
}

func TestSandboxInCmdline(t *testing.T) {
	want := map[string]bool{"sb-0123456789ab": true, "sb-1": true}
	tests := []struct {
		cmdline, id string
	}{
		{runscCmdline("sb-0123456789ab"), "sb-0123456789ab"},
		{"runsc-gofer\x00--log=/d/sb-1/runsc.log\x00gofer\x00", "sb-1"},
		{"runsc-gofer\x00--log=/d/sb-1.log\x00", "sb-1"},
		{"runsc-gofer\x00--log=/d/sb-10/runsc.log\x00", ""}, // another sandbox
		{"xsb-1\x00", ""},
		{"/usr/sbin/cove\x00serve\x00", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := sandboxInCmdline([]byte(tt.cmdline), want); got != tt.id {
			t.Errorf("sandboxInCmdline(%q) = %q, want %q", tt.cmdline, got, tt.id)
		}
	}
}

func TestPssBySandbox(t *testing.T) {
	root := t.TempDir()
	proc := func(pid int, cmdline, rollup string) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644)
		if rollup != "" {
			os.WriteFile(filepath.Join(dir, "smaps_rollup"), []byte(rollup), 0o644)
		}
	}
	proc(100, runscCmdline("sb-a"), "Pss: 1000 kB\n")
	proc(101, "runsc-gofer\x00--log=/d/sb-a/runsc.log\x00", "Pss: 24 kB\n")
	proc(200, runscCmdline("sb-b"), sampleRollup)
	proc(300, runscCmdline("sb-c"), "Pss: 5 kB\n")    // not asked for
	proc(400, runscCmdline("sb-a"), "Pss: 9999 kB\n") // self
	proc(500, runscCmdline("sb-b"), "")               // exited meanwhile
	os.MkdirAll(filepath.Join(root, "self"), 0o755)
	os.WriteFile(filepath.Join(root, "meminfo"), []byte("MemTotal: 1 kB\n"), 0o644)

	got, err := pssBySandbox(root, []string{"sb-a", "sb-b", "sb-d"}, 400)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]pssSum{"sb-a": {kib: 1024, procs: 2}, "sb-b": {kib: 21034, procs: 1}}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: got %+v, want %+v", id, got[id], w)
		}
	}
}
