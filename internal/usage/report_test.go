package usage

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

var t0 = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)

func TestParseRange(t *testing.T) {
	now := t0
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name, from, to string
		wantFrom       time.Time
		wantTo         time.Time
		bad            bool
	}{
		{name: "defaults", wantFrom: month, wantTo: now},
		{name: "rfc3339", from: "2026-03-10T00:00:00Z", to: "2026-03-11T00:00:00+01:00",
			wantFrom: time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC), wantTo: time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)},
		{name: "unix", from: "1773100800", to: "1773187200", wantFrom: time.Unix(1773100800, 0), wantTo: time.Unix(1773187200, 0)},
		{name: "from only", from: "2026-03-14T00:00:00Z", wantFrom: time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC), wantTo: now},
		{name: "reversed", from: "2026-03-11T00:00:00Z", to: "2026-03-10T00:00:00Z", bad: true},
		{name: "empty", from: "1773100800", to: "1773100800", bad: true},
		{name: "from after default to", from: "2026-04-01T00:00:00Z", bad: true},
		{name: "garbage from", from: "yesterday", bad: true},
		{name: "garbage to", to: "2026-13-01", bad: true},
		{name: "date without time", from: "2026-03-01", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, to, err := ParseRange(tt.from, tt.to, now)
			if tt.bad {
				if !errors.Is(err, ErrBadRange) {
					t.Fatalf("ParseRange(%q, %q) = %v, %v, %v; want ErrBadRange", tt.from, tt.to, f, to, err)
				}
				return
			}
			if err != nil || !f.Equal(tt.wantFrom) || !to.Equal(tt.wantTo) {
				t.Fatalf("ParseRange(%q, %q) = %v, %v, %v; want %v, %v", tt.from, tt.to, f, to, err, tt.wantFrom, tt.wantTo)
			}
		})
	}
}

func at(secs int) time.Time { return t0.Add(time.Duration(secs) * time.Second) }

func TestOverlap(t *testing.T) {
	from, to, now := at(100), at(200), at(300)
	tests := []struct {
		name       string
		start, end time.Time
		want       time.Duration
	}{
		{"inside", at(110), at(150), 40 * time.Second},
		{"before", at(10), at(90), 0},
		{"ends at from", at(10), at(100), 0},
		{"after", at(200), at(250), 0},
		{"straddles from", at(50), at(130), 30 * time.Second},
		{"straddles to", at(190), at(260), 10 * time.Second},
		{"covers", at(0), at(400), 100 * time.Second},
		{"open, started inside", at(150), time.Time{}, 50 * time.Second},
		{"open, started before", at(0), time.Time{}, 100 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := overlap(store.UsageInterval{StartedAt: tt.start, EndedAt: tt.end}, from, to, now)
			if got != tt.want {
				t.Fatalf("overlap = %s, want %s", got, tt.want)
			}
		})
	}
	// An open interval in a range reaching past now counts until now.
	if got := overlap(store.UsageInterval{StartedAt: at(250)}, at(0), at(1000), now); got != 50*time.Second {
		t.Fatalf("open interval up to now = %s, want 50s", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestAggregate(t *testing.T) {
	ivs := []store.UsageInterval{
		// sb-a ran 0-100, paused, ran 200-250: the gap counts nothing.
		{SandboxID: "sb-a", Template: "py", VCPUs: 2, MemoryMiB: 512, StartedAt: at(0), EndedAt: at(100)},
		{SandboxID: "sb-a", Template: "py", VCPUs: 2, MemoryMiB: 512, StartedAt: at(200), EndedAt: at(250)},
		// sb-b runs from 50 on.
		{SandboxID: "sb-b", Template: "py", VCPUs: 1, MemoryMiB: 1024, StartedAt: at(50)},
		// sb-c came from an image and ran before the range.
		{SandboxID: "sb-c", Template: "default-0001", VCPUs: 4, MemoryMiB: 2048, StartedAt: at(-100), EndedAt: at(-10)},
		{SandboxID: "sb-d", Template: "default-0001", VCPUs: 1, MemoryMiB: 256, StartedAt: at(20), EndedAt: at(30)},
	}
	counts := []store.UsageCount{
		{SandboxID: "sb-a", Template: "py", At: at(90), Execs: 3, BytesIn: 100, BytesOut: 10},
		{SandboxID: "sb-a", Template: "py", At: at(250), Execs: 1},
		{SandboxID: "sb-b", Template: "py", At: at(60), Execs: 2, BytesIn: 5},
		{SandboxID: "sb-b", Template: "py", At: at(400), Execs: 50},          // after the range
		{SandboxID: "sb-c", Template: "default-0001", At: at(-10), Execs: 7}, // before it
	}
	from, to, now := at(0), at(300), at(500)
	u := Aggregate(ivs, counts, from, to, now, map[string]bool{"sb-b": true})

	type want struct {
		secs, vcpu, gib float64
		execs, in, out  int64
	}
	check := func(name string, f apitype.UsageFigures, w want) {
		t.Helper()
		if !near(f.SandboxSeconds, w.secs) || !near(f.VCPUSeconds, w.vcpu) || !near(f.GiBSeconds, w.gib) ||
			f.Execs != w.execs || f.BytesIn != w.in || f.BytesOut != w.out {
			t.Errorf("%s = %+v, want %+v", name, f, w)
		}
	}
	a := want{150, 300, 75, 4, 100, 10}
	b := want{250, 250, 250, 2, 5, 0}
	d := want{10, 10, 2.5, 0, 0, 0}
	check("totals", u.Totals, want{410, 560, 327.5, 6, 105, 10})
	if len(u.BySandbox) != 3 { // sb-c had nothing in the range
		t.Fatalf("by sandbox = %+v", u.BySandbox)
	}
	for i, w := range []struct {
		id  string
		run bool
		f   want
	}{{"sb-a", false, a}, {"sb-b", true, b}, {"sb-d", false, d}} {
		r := u.BySandbox[i]
		if r.SandboxID != w.id || r.Running != w.run {
			t.Errorf("by sandbox[%d] = %+v, want %s running=%v", i, r, w.id, w.run)
		}
		check(w.id, r.UsageFigures, w.f)
	}
	if len(u.ByTemplate) != 2 || u.ByTemplate[0].Template != "default-0001" || u.ByTemplate[1].Template != "py" {
		t.Fatalf("by template = %+v", u.ByTemplate)
	}
	check("default-0001", u.ByTemplate[0].UsageFigures, d)
	check("py", u.ByTemplate[1].UsageFigures, want{400, 550, 325, 6, 105, 10})

	// Adjacent ranges add up to the whole.
	u1 := Aggregate(ivs, counts, at(0), at(120), now, nil)
	u2 := Aggregate(ivs, counts, at(120), at(300), now, nil)
	if !near(u1.Totals.VCPUSeconds+u2.Totals.VCPUSeconds, u.Totals.VCPUSeconds) || u1.Totals.Execs+u2.Totals.Execs != u.Totals.Execs {
		t.Errorf("split ranges %+v + %+v != %+v", u1.Totals, u2.Totals, u.Totals)
	}

	empty := Aggregate(nil, nil, from, to, now, nil)
	if empty.BySandbox == nil || empty.ByTemplate == nil || empty.Totals != (apitype.UsageFigures{}) {
		t.Errorf("empty = %+v: want zero totals and empty (not null) rows", empty)
	}
}

func TestWithQuota(t *testing.T) {
	disk := int64(300)
	tests := []struct {
		name   string
		limits tenant.Limits
		inUse  apitype.UsageInUse
		want   apitype.UsageRemaining
	}{
		{"unlimited", tenant.Limits{}, apitype.UsageInUse{Sandboxes: 3}, apitype.UsageRemaining{}},
		{"some left", tenant.Limits{MaxSandboxes: 5, MaxVCPUs: 8, MaxMemoryMiB: 4096, MaxDiskMiB: 1000},
			apitype.UsageInUse{Sandboxes: 2, VCPUs: 3, MemoryMiB: 1024, DiskMiB: &disk},
			apitype.UsageRemaining{Sandboxes: ptr(3), VCPUs: ptr(5), MemoryMiB: ptr(int64(3072)), DiskMiB: ptr(int64(700))}},
		{"over, never negative; disk unknown", tenant.Limits{MaxSandboxes: 1, MaxDiskMiB: 1000},
			apitype.UsageInUse{Sandboxes: 2}, apitype.UsageRemaining{Sandboxes: ptr(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := apitype.Usage{InUse: tt.inUse}
			WithQuota(&u, tt.limits)
			if u.Quota.MaxSandboxes != tt.limits.MaxSandboxes || u.Quota.MaxDiskMiB != tt.limits.MaxDiskMiB {
				t.Errorf("quota = %+v, want %+v", u.Quota, tt.limits)
			}
			if !eqPtr(u.Remaining.Sandboxes, tt.want.Sandboxes) || !eqPtr(u.Remaining.VCPUs, tt.want.VCPUs) ||
				!eqPtr(u.Remaining.MemoryMiB, tt.want.MemoryMiB) || !eqPtr(u.Remaining.DiskMiB, tt.want.DiskMiB) {
				t.Errorf("remaining = %s, want %s", show(u.Remaining), show(tt.want))
			}
		})
	}
}

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func show(r apitype.UsageRemaining) string {
	f := func(p any) string {
		switch v := p.(type) {
		case *int:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *int64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		}
		return "nil"
	}
	return f(r.Sandboxes) + "/" + f(r.VCPUs) + "/" + f(r.MemoryMiB) + "/" + f(r.DiskMiB)
}

func TestParseNetDev(t *testing.T) {
	data := []byte(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
cove-h0:  5000      40    0    0    0     0          0         0     7000      50    0    0    0     0       0          0
  tap0:    100       1    0    0    0     0          0         0      200       2    0    0    0     0       0          0
`)
	rx, tx, err := parseNetDev(data)
	if err != nil || rx != 5100 || tx != 7200 {
		t.Fatalf("parseNetDev = %d, %d, %v; want 5100, 7200", rx, tx, err)
	}
	if _, _, err := parseNetDev([]byte("eth0: 1 2 3\n")); err == nil {
		t.Fatal("a short line parsed")
	}
}
