package bench

// The memory of sandboxes: the Pss of the host processes that run them,
// read from /proc, which needs the daemon's host and root.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// coldPss measures the Pss of one sandbox started cold from the image.
func (s *snapBench) coldPss(ctx context.Context) (*baseline, error) {
	sb, release, err := s.createOne(ctx, apitype.CreateSandboxRequest{})
	defer release()
	if err != nil {
		return nil, err
	}
	r, err := s.pssResult(ctx, []string{sb.ID})
	if err != nil {
		return nil, err
	}
	return &baseline{Name: "cold sandbox", P50: r.P50, P99: r.P99, N: r.N}, nil
}

// pssResult waits for the sandboxes ids to settle and returns their Pss
// per sandbox, the total over their processes divided by their number.
func (s *snapBench) pssResult(ctx context.Context, ids []string) (result, error) {
	select {
	case <-time.After(s.o.PssSettle):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	sums, err := pssBySandbox("/proc", ids, os.Getpid())
	if err != nil {
		return result{}, err
	}
	var missing []string
	var totalKiB int64
	procs := 0
	for _, id := range ids {
		sum := sums[id]
		if sum.procs == 0 {
			missing = append(missing, id)
		}
		totalKiB += sum.kib
		procs += sum.procs
	}
	if len(missing) > 0 {
		return result{}, fmt.Errorf("no processes found for %d of %d sandboxes (such as %s): run cove bench on the daemon's host",
			len(missing), len(ids), missing[0])
	}
	per := float64(totalKiB) / 1024 / float64(len(ids))
	s.logf("Pss of %d sandboxes: %s over %d processes, %.1f MiB each", len(ids), humanize.IBytes(uint64(totalKiB<<10)), procs, per)
	return result{Name: "pss_per_child", Unit: unitMiB, P50: round3(per), P99: round3(per), N: len(ids)}, nil
}

// pssSum is the memory of one sandbox's processes.
type pssSum struct {
	kib   int64
	procs int
}

// pssBySandbox sums the Pss of the processes under procRoot (/proc) whose
// command line names one of the sandboxes ids, by sandbox, leaving out
// process self. Reading another user's smaps_rollup needs root.
func pssBySandbox(procRoot string, ids []string, self int) (map[string]pssSum, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	out := make(map[string]pssSum)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			continue // gone
		}
		id := sandboxInCmdline(cmdline, want)
		if id == "" {
			continue
		}
		rollup, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "smaps_rollup"))
		switch {
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("read the memory of process %d of sandbox %s: %w (run cove bench as root)", pid, id, err)
		case err != nil:
			continue // gone, or a kernel without smaps_rollup; a missing sandbox is reported
		}
		kib, err := parsePss(rollup)
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		sum := out[id]
		sum.kib += kib
		sum.procs++
		out[id] = sum
	}
	return out, nil
}

// sandboxInCmdline returns the sandbox of want that the NUL-separated
// command line names as a whole word (as in --log=DIR/ID/runsc.log), or
// "".
func sandboxInCmdline(cmdline []byte, want map[string]bool) string {
	isWord := func(r rune) bool {
		return r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	for _, w := range bytes.FieldsFunc(cmdline, func(r rune) bool { return !isWord(r) }) {
		if want[string(w)] {
			return string(w)
		}
	}
	return ""
}

// parsePss returns the Pss line of a smaps_rollup file, in KiB.
func parsePss(rollup []byte) (int64, error) {
	for line := range strings.Lines(string(rollup)) {
		v, ok := strings.CutPrefix(line, "Pss:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("smaps_rollup has no Pss line")
}
