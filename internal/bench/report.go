package bench

// The report: its JSON shape (docs/BENCHMARKS.md and scripts read it, so
// it changes only by adding), the summaries that make its rows, and its
// table.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// report is the bench's JSON output. Each measurement is a row of
// Results, so new benchmarks (spawn, branch, ...) add rows, not fields.
type report struct {
	Machine        machine  `json:"machine"`
	Commit         string   `json:"commit"`
	Time           string   `json:"time"` // RFC 3339, UTC
	Backend        string   `json:"backend"`
	DaemonVersion  string   `json:"daemon_version"`
	RuntimeVersion string   `json:"runtime_version"`
	Accel          string   `json:"accel,omitempty"` // QEMU's accelerator: tcg or kvm
	Results        []result `json:"results"`
}

// machine describes the host the bench ran on.
type machine struct {
	CPU         string `json:"cpu"`
	NProc       int    `json:"nproc"`
	MemTotalMiB int64  `json:"mem_total_mib"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
}

// Units of results. Lower is better for latencies, higher for rates.
const (
	unitMs    = "ms"
	unitMBps  = "MB/s" // decimal megabytes per second
	unitMiB   = "MiB"
	unitRatio = "x"
	// unitSeconds is CPU time: what the host spent, all cores together.
	unitSeconds = "cpu-s"
)

// result is one measurement: a latency's or a rate's percentiles over N
// samples (a single transfer has N 1 and p50 = p99).
type result struct {
	Name     string    `json:"name"`
	Unit     string    `json:"unit"`
	P50      float64   `json:"p50"`
	P99      float64   `json:"p99"`
	N        int       `json:"n"`
	Baseline *baseline `json:"baseline,omitempty"`
	Target   string    `json:"target,omitempty"`
	Error    string    `json:"error,omitempty"` // the measurement failed
}

// baseline is the same measurement of something cove is compared with,
// taken in the same run, in the result's unit.
type baseline struct {
	Name string  `json:"name"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	N    int     `json:"n"`
}

// failed lists the rows whose measurement failed.
func (rep report) failed() []string {
	var names []string
	for _, r := range rep.Results {
		if r.Error != "" {
			names = append(names, r.Name)
		}
	}
	return names
}

// write prints rep to out, as JSON or a table, and writes its JSON to the
// file opts.Out if set.
func (rep report) write(out io.Writer, opts Options) error {
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if opts.Out != "" {
		if err := fsutil.WriteFile(opts.Out, js.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if opts.JSON {
		_, err := out.Write(js.Bytes())
		return err
	}
	return printTable(out, rep)
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest sample that at least p% of the
// samples are at or below. It returns 0 for no samples.
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// p*n first: 99*200/100 is exactly 198, 0.99*200 need not be.
	rank := int(math.Ceil(p * float64(n) / 100))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// latencyResult summarizes latencies in milliseconds.
func latencyResult(name string, lat []time.Duration) result {
	ms := make([]float64, len(lat))
	for i, d := range lat {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return msResult(name, ms)
}

// msResult summarizes values already in milliseconds.
func msResult(name string, ms []float64) result {
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	return result{
		Name: name,
		Unit: unitMs,
		P50:  round3(percentile(sorted, 50)),
		P99:  round3(percentile(sorted, 99)),
		N:    len(sorted),
	}
}

// rateResult is the rate of one transfer of n bytes in d, in decimal MB/s
// as network and disk speeds are usually quoted.
func rateResult(name string, n int64, d time.Duration) result {
	var r float64
	if d > 0 {
		r = round3(float64(n) / 1e6 / d.Seconds())
	}
	return result{Name: name, Unit: unitMBps, P50: r, P99: r, N: 1}
}

func failedResult(name, unit string, err error) result {
	return result{Name: name, Unit: unit, Error: err.Error()}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func fmtMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// fmtValue formats a result's number with its unit.
func fmtValue(v float64, unit string) string {
	if v < 10 {
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

func printTable(w io.Writer, rep report) error {
	fmt.Fprintf(w, "%s, %d CPUs, %d MiB, kernel %s; backend %s %s\n\n",
		rep.Machine.CPU, rep.Machine.NProc, rep.Machine.MemTotalMiB, rep.Machine.Kernel, rep.Backend, rep.RuntimeVersion)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tP50\tP99\tN\tBASELINE (P50 / P99)\tTARGET")
	var errs []string
	for _, r := range rep.Results {
		if r.Error != "" {
			// Errors are long; they go below the table.
			fmt.Fprintf(tw, "%s\tfailed\t-\t-\t-\t-\n", r.Name)
			errs = append(errs, r.Name+": "+r.Error)
			continue
		}
		bl := "-"
		if r.Baseline != nil {
			bl = fmt.Sprintf("%s %s / %s", r.Baseline.Name, fmtValue(r.Baseline.P50, r.Unit), fmtValue(r.Baseline.P99, r.Unit))
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n",
			r.Name, fmtValue(r.P50, r.Unit), fmtValue(r.P99, r.Unit), r.N, bl, target)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(errs, "\n"))
	}
	return nil
}

// machineInfo describes this host from /proc; fields it can't read stay
// empty.
func machineInfo() machine {
	m := machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU = procField(string(b), "model name")
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(procField(string(b), "MemTotal"), " kB"), 10, 64)
		m.MemTotalMiB = kb / 1024
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc
// file with the given key.
func procField(s, key string) string {
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
