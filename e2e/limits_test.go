package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestLimits: the CPU quota lands in the host cgroup, the memory limit is
// the guest's whole memory, and a runaway process dies inside the sandbox
// without taking the sandbox down.
func TestLimits(t *testing.T) {
	d := suite.shared
	sb := create(t, d, apitype.CreateSandboxRequest{CPUs: 2, MemoryMiB: 256})[0]
	defer d.c.DeleteSandbox(context.Background(), sb.id)

	quota := ""
	for _, p := range []string{"/sys/fs/cgroup/cpu/cove/" + sb.id + "/cpu.cfs_quota_us", "/sys/fs/cgroup/cove/" + sb.id + "/cpu.max"} {
		if b, err := os.ReadFile(p); err == nil {
			quota = strings.Fields(string(b))[0]
		}
	}
	if quota != "200000" {
		t.Errorf("host cgroup CPU quota = %q, want 200000 (2 CPUs)", quota)
	}
	if out := execOK(t, d, sb, "grep MemTotal /proc/meminfo"); !strings.Contains(out, " 262144 kB") && !(backend() == "qemu" && guestMemMiB(out) > 200 && guestMemMiB(out) <= 256) {
		t.Errorf("guest memory: %q, want 256 MiB", out)
	}
	res, err := d.c.Exec(context.Background(), sb.id, sb.token, apitype.ExecRequest{
		Args: []string{"python3", "-c", "x = [bytearray(16 << 20) for _ in range(64)]; print('allocated')"}, TimeoutSecs: 60})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "allocated") {
		t.Errorf("allocating 1 GiB in a 256 MiB sandbox succeeded: %+v", res)
	}
	if out := execOK(t, d, sb, "echo alive"); out != "alive\n" {
		t.Errorf("sandbox after the runaway process: %q", out)
	}
}

// guestMemMiB parses a MemTotal line: a VM's kernel keeps some of its RAM.
func guestMemMiB(line string) int {
	var kb int
	fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "MemTotal:")), "%d", &kb)
	return kb / 1024
}
