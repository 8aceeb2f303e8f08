package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/loadtest"
)

// TestLoadtestShortRun runs `cove loadtest` against the shared daemon for
// a short bounded run: no op fails, every kind of op runs, and nothing it
// made is left.
func TestLoadtestShortRun(t *testing.T) {
	d := suite.shared
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// 10 s; under TCG, whose boots take seconds each, 40 ops instead, and
	// few VMs at once: each idle TCG guest burns host CPU, and a crowd of
	// them on a small host starves a booting one past its start timeout.
	// Its first client runs every op once before drawing at random.
	bound := []string{"-d", "10s"}
	if backend() == "qemu" {
		bound = []string{"-d", "0", "-n", "40", "--max-sandboxes", "3"}
	}
	args := append([]string{"loadtest", "--url", d.url, "--api-key", d.key, "-c", "4", "--snapshot", suite.base,
		"--daemon-pid", strconv.Itoa(d.cmd.Process.Pid), "--json"}, bound...)
	cmd := exec.CommandContext(ctx, suite.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep loadtest.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("loadtest: %v, its JSON: %v\nstdout:\n%s\nstderr:\n%s", runErr, err, stdout.String(), stderr.String())
	}
	if runErr != nil || rep.Errors != 0 {
		t.Errorf("loadtest: %v, %d errors: %+v\nstderr:\n%s\ndaemon log:\n%s", runErr, rep.Errors, rep.ErrorsByCode, stderr.String(), d.logTail())
	}
	ran := map[string]int{}
	for _, o := range rep.Ops {
		ran[o.Op] = o.N
	}
	for _, op := range loadtest.Ops() {
		if ran[op] == 0 {
			t.Errorf("op %s never ran: %+v", op, rep.Ops)
		}
	}
	if rep.Daemon.Before == nil || rep.Daemon.After == nil {
		t.Errorf("no daemon RSS and fds: %+v", rep.Daemon)
	}
	t.Logf("%d ops, %.1f ops/s; daemon %+v -> %+v", rep.TotalOps, rep.OpsPerSec, rep.Daemon.Before, rep.Daemon.After)

	// Nothing of the run is left, by label and by tag.
	sbs, err := d.c.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.Labels[loadtest.Label] != "" {
			t.Errorf("sandbox %s of a load test left: %+v", sb.ID, sb)
		}
	}
	sns, err := d.c.ListSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range sns {
		if strings.HasPrefix(sn.Tag, "loadtest-") {
			t.Errorf("snapshot %s of a load test left", sn.Tag)
		}
	}
}

// TestLoadtestRefusesRemote: a daemon URL off loopback is refused before
// any call.
func TestLoadtestRefusesRemote(t *testing.T) {
	out, err := exec.Command(suite.bin, "loadtest", "--url", "http://192.0.2.1:8080", "--api-key", "x", "-n", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "loopback") {
		t.Errorf("loadtest of a remote daemon: %v, %s; want a refusal naming loopback", err, out)
	}
}
