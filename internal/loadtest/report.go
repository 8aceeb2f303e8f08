package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cove-sandbox/cove/pkg/client"
)

// Report is a load test's outcome, as --json prints it.
type Report struct {
	RunID         string  `json:"run_id"`
	Backend       string  `json:"backend"`
	DaemonVersion string  `json:"daemon_version"`
	Clients       int     `json:"clients"`
	OpsLimit      int     `json:"ops_limit,omitempty"`
	DurationSecs  float64 `json:"duration_secs,omitempty"`
	MaxSandboxes  int     `json:"max_sandboxes"`
	Mix           string  `json:"mix"`
	ElapsedSecs   float64 `json:"elapsed_secs"`
	TotalOps      int     `json:"total_ops"`
	OpsPerSec     float64 `json:"ops_per_sec"`
	Errors        int     `json:"errors"`
	// Ops are the figures by operation, in Ops() order, of ops run.
	Ops          []OpStats    `json:"ops"`
	ErrorsByCode []ErrorCount `json:"errors_by_code"`
	Daemon       DaemonStats  `json:"daemon"`
	// SweptSandboxes are sandboxes of the run its clients did not know
	// of (a create that failed after making one), deleted at the end.
	SweptSandboxes []string `json:"swept_sandboxes,omitempty"`
	// LeftSandboxes and LeftSnapshots are what the run made and could
	// not delete: nothing, normally.
	LeftSandboxes []string `json:"left_sandboxes"`
	LeftSnapshots []string `json:"left_snapshots"`
	Interrupted   bool     `json:"interrupted,omitempty"`
}

// OpStats are one operation's figures; the latencies are of the ops that
// succeeded.
type OpStats struct {
	Op        string  `json:"op"`
	N         int     `json:"n"`
	Errors    int     `json:"errors"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P90Ms     float64 `json:"p90_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// ErrorCount is how often one op failed with one code, and one of the
// messages.
type ErrorCount struct {
	Op      string `json:"op"`
	Code    string `json:"code"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// DaemonStats are the daemon's RSS and open files before the run and
// after its clean-up, when it runs on this host.
type DaemonStats struct {
	PID    int        `json:"pid,omitempty"`
	Before *ProcStats `json:"before,omitempty"`
	After  *ProcStats `json:"after,omitempty"`
	// Unavailable says why there are no figures.
	Unavailable string `json:"unavailable,omitempty"`
}

// stats collects the ops' outcomes from every client.
type stats struct {
	mu   sync.Mutex
	lat  map[string][]time.Duration
	n    map[string]int
	errs map[[2]string]*ErrorCount
}

func newStats() *stats {
	return &stats{lat: map[string][]time.Duration{}, n: map[string]int{}, errs: map[[2]string]*ErrorCount{}}
}

func (s *stats) record(op string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[op]++
	if err == nil {
		s.lat[op] = append(s.lat[op], d)
		return
	}
	k := [2]string{op, errorCode(err)}
	if e := s.errs[k]; e != nil {
		e.Count++
		return
	}
	s.errs[k] = &ErrorCount{Op: op, Code: k[1], Count: 1, Example: err.Error()}
}

// errorCode names an error for counting: the daemon's code, else what
// kind of failure it was.
func errorCode(err error) string {
	var ce *client.Error
	var mm mismatchError
	switch {
	case errors.As(err, &ce) && ce.Code != "":
		return ce.Code
	case errors.As(err, &ce):
		return fmt.Sprintf("http_%d", ce.Status)
	case errors.As(err, &mm):
		return "mismatch"
	case errors.Is(err, context.DeadlineExceeded):
		return "client_timeout"
	default:
		return "transport"
	}
}

// fill puts the figures into rep.
func (s *stats) fill(rep *Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep.Ops, rep.ErrorsByCode, rep.TotalOps, rep.Errors = nil, []ErrorCount{}, 0, 0
	for _, op := range opOrder {
		n := s.n[op]
		if n == 0 {
			continue
		}
		lat := slices.Clone(s.lat[op])
		slices.Sort(lat)
		st := OpStats{Op: op, N: n, Errors: n - len(lat), OpsPerSec: perSec(n, rep.ElapsedSecs),
			P50Ms: ms(percentile(lat, 50)), P90Ms: ms(percentile(lat, 90)), P99Ms: ms(percentile(lat, 99))}
		if len(lat) > 0 {
			st.MaxMs = ms(lat[len(lat)-1])
		}
		rep.Ops = append(rep.Ops, st)
		rep.TotalOps += n
		rep.Errors += st.Errors
	}
	rep.OpsPerSec = perSec(rep.TotalOps, rep.ElapsedSecs)
	for _, e := range s.errs {
		rep.ErrorsByCode = append(rep.ErrorsByCode, *e)
	}
	sort.Slice(rep.ErrorsByCode, func(i, j int) bool {
		a, b := rep.ErrorsByCode[i], rep.ErrorsByCode[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Op+a.Code < b.Op+b.Code
	})
}

// percentile is the nearest-rank p-th percentile of sorted, 0 if empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func perSec(n int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// verdict is the run's error: any op failed, anything left, cut short.
func (rep Report) verdict() error {
	var why []string
	if rep.Errors > 0 {
		why = append(why, fmt.Sprintf("%d of %d ops failed", rep.Errors, rep.TotalOps))
	}
	if n := len(rep.LeftSandboxes) + len(rep.LeftSnapshots); n > 0 {
		why = append(why, fmt.Sprintf("%d sandboxes and snapshots left behind", n))
	}
	if rep.Interrupted {
		why = append(why, "interrupted")
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("loadtest: %s", strings.Join(why, "; "))
}

// write prints the report: JSON, or tables.
func (rep Report) write(out io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "%d clients, %d ops in %.1f s: %.1f ops/s, %d errors (backend %s, run %s)\n\n",
		rep.Clients, rep.TotalOps, rep.ElapsedSecs, rep.OpsPerSec, rep.Errors, rep.Backend, rep.RunID)
	fmt.Fprintln(tw, "op\tn\terrors\tops/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\t")
	for _, o := range rep.Ops {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", o.Op, o.N, o.Errors, o.OpsPerSec, o.P50Ms, o.P90Ms, o.P99Ms, o.MaxMs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.ErrorsByCode) > 0 {
		fmt.Fprintln(out, "\nerrors by code:")
		for _, e := range rep.ErrorsByCode {
			fmt.Fprintf(out, "  %-7s %-16s %5d  e.g. %s\n", e.Op, e.Code, e.Count, e.Example)
		}
	}
	fmt.Fprintln(out)
	rep.Daemon.write(out)
	if len(rep.SweptSandboxes) > 0 {
		fmt.Fprintf(out, "deleted at the end, made by failed creates: %v\n", rep.SweptSandboxes)
	}
	if n := len(rep.LeftSandboxes) + len(rep.LeftSnapshots); n > 0 {
		fmt.Fprintf(out, "left behind: sandboxes %v, snapshots %v\n", rep.LeftSandboxes, rep.LeftSnapshots)
	}
	return nil
}

func (d DaemonStats) write(out io.Writer) {
	if d.Before == nil || d.After == nil {
		fmt.Fprintf(out, "daemon RSS and open files: unavailable: %s\n", d.Unavailable)
		return
	}
	fmt.Fprintf(out, "daemon (pid %d): RSS %s -> %s, open files %d -> %d\n", d.PID,
		humanize.IBytes(uint64(d.Before.RSSBytes)), humanize.IBytes(uint64(d.After.RSSBytes)), d.Before.FDs, d.After.FDs)
}
