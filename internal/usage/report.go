package usage

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// ErrBadRange is a from/to the caller must fix; the API answers 400.
var ErrBadRange = errors.New("bad usage range")

// ParseRange reads a usage range: each bound RFC 3339 or unix seconds;
// from defaults to the start of now's UTC month, to to now. A range that
// is empty or reversed is ErrBadRange.
func ParseRange(from, to string, now time.Time) (time.Time, time.Time, error) {
	u := now.UTC()
	f, t := time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC), now
	var err error
	if from != "" {
		if f, err = parseTime("from", from); err != nil {
			return time.Time{}, time.Time{}, err
		}
	}
	if to != "" {
		if t, err = parseTime("to", to); err != nil {
			return time.Time{}, time.Time{}, err
		}
	}
	if !f.Before(t) {
		return time.Time{}, time.Time{}, fmt.Errorf("%w: from (%s) must be before to (%s)", ErrBadRange,
			f.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
	}
	return f, t, nil
}

func parseTime(name, v string) (time.Time, error) {
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(secs, 0), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %q is neither RFC 3339 (2026-01-02T15:04:05Z) nor unix seconds", ErrBadRange, name, v)
	}
	return t, nil
}

// overlap is how long iv ran within [from, to), an open one until now.
func overlap(iv store.UsageInterval, from, to, now time.Time) time.Duration {
	end := iv.EndedAt
	if end.IsZero() {
		end = now
	}
	start := iv.StartedAt
	if start.Before(from) {
		start = from
	}
	if end.After(to) {
		end = to
	}
	if !end.After(start) {
		return 0
	}
	return end.Sub(start)
}

// add adds d of a sandbox with vcpus and memMiB to f.
func (f *figures) addTime(d time.Duration, vcpus, memMiB int) {
	s := d.Seconds()
	f.SandboxSeconds += s
	f.VCPUSeconds += s * float64(vcpus)
	f.GiBSeconds += s * float64(memMiB) / 1024
}

type figures apitype.UsageFigures

func (f *figures) addCount(c store.UsageCount) {
	f.Execs += c.Execs
	f.BytesIn += c.BytesIn
	f.BytesOut += c.BytesOut
}

func (f *figures) plus(g figures) {
	f.SandboxSeconds += g.SandboxSeconds
	f.VCPUSeconds += g.VCPUSeconds
	f.GiBSeconds += g.GiBSeconds
	f.addCount(store.UsageCount{Execs: g.Execs, BytesIn: g.BytesIn, BytesOut: g.BytesOut})
}

// Aggregate sums intervals (clipped to [from, to), open ones running until
// now) and counts (made in the range) in total, by template and by
// sandbox. running names the sandboxes that run now. Rows are sorted by
// name.
func Aggregate(ivs []store.UsageInterval, counts []store.UsageCount, from, to, now time.Time, running map[string]bool) apitype.Usage {
	type row struct {
		template string
		f        figures
	}
	boxes := map[string]*row{}
	get := func(id, tmpl string) *row {
		r := boxes[id]
		if r == nil {
			r = &row{template: tmpl}
			boxes[id] = r
		}
		return r
	}
	for _, iv := range ivs {
		if d := overlap(iv, from, to, now); d > 0 {
			get(iv.SandboxID, iv.Template).f.addTime(d, iv.VCPUs, iv.MemoryMiB)
		}
	}
	for _, c := range counts {
		if !c.At.Before(from) && c.At.Before(to) {
			get(c.SandboxID, c.Template).f.addCount(c)
		}
	}
	out := apitype.Usage{From: from, To: to, ByTemplate: []apitype.TemplateUsage{}, BySandbox: []apitype.SandboxUsage{}}
	var total figures
	byTmpl := map[string]*figures{}
	for id, r := range boxes {
		total.plus(r.f)
		t := byTmpl[r.template]
		if t == nil {
			t = &figures{}
			byTmpl[r.template] = t
		}
		t.plus(r.f)
		out.BySandbox = append(out.BySandbox, apitype.SandboxUsage{SandboxID: id, Template: r.template, Running: running[id],
			UsageFigures: apitype.UsageFigures(r.f)})
	}
	for name, f := range byTmpl {
		out.ByTemplate = append(out.ByTemplate, apitype.TemplateUsage{Template: name, UsageFigures: apitype.UsageFigures(*f)})
	}
	sort.Slice(out.BySandbox, func(i, j int) bool { return out.BySandbox[i].SandboxID < out.BySandbox[j].SandboxID })
	sort.Slice(out.ByTemplate, func(i, j int) bool { return out.ByTemplate[i].Template < out.ByTemplate[j].Template })
	out.Totals = apitype.UsageFigures(total)
	return out
}

// WithQuota fills in u's quota from l and what it leaves beside u.InUse.
func WithQuota(u *apitype.Usage, l tenant.Limits) {
	u.Quota = l
	in := u.InUse
	u.Remaining = apitype.UsageRemaining{}
	if l.MaxSandboxes > 0 {
		u.Remaining.Sandboxes = ptr(max(0, l.MaxSandboxes-in.Sandboxes))
	}
	if l.MaxVCPUs > 0 {
		u.Remaining.VCPUs = ptr(max(0, l.MaxVCPUs-in.VCPUs))
	}
	if l.MaxMemoryMiB > 0 {
		u.Remaining.MemoryMiB = ptr(max(0, l.MaxMemoryMiB-in.MemoryMiB))
	}
	if l.MaxDiskMiB > 0 && in.DiskMiB != nil {
		u.Remaining.DiskMiB = ptr(max(0, l.MaxDiskMiB-*in.DiskMiB))
	}
}

func ptr[T any](v T) *T { return &v }
