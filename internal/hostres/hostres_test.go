package hostres

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := Paths{
		Meminfo:    write("meminfo", "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20480000 kB\n"),
		Loadavg:    write("loadavg", "0.10 0.20 0.30 3/1234 5678\n"),
		PidMax:     write("pid_max", "32768\n"),
		ThreadsMax: write("threads_max", "190000\n"),
	}
	r, err := p.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := Reading{MemTotalMiB: 24000, MemAvailableMiB: 20000, Tasks: 1234, TaskMax: 32768}
	if r != want {
		t.Fatalf("Read = %+v, want %+v", r, want)
	}

	p.Loadavg = write("bad", "0.1 0.2\n")
	if _, err := p.Read(); err == nil {
		t.Fatal("a malformed loadavg was accepted")
	}
}

func TestReadHost(t *testing.T) {
	r, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if r.MemTotalMiB <= 0 || r.MemAvailableMiB <= 0 || r.MemAvailableMiB > r.MemTotalMiB || r.Tasks <= 0 || r.TaskMax < r.Tasks {
		t.Fatalf("implausible reading of this host: %+v", r)
	}
}

func TestFit(t *testing.T) {
	r := Reading{MemTotalMiB: 24000, MemAvailableMiB: 10000, Tasks: 1000, TaskMax: 32768}
	c := Cost{MemoryMiB: 30, Tasks: 60}
	for _, tc := range []struct {
		name  string
		n     int
		tasks int // on the host already, if not r's
		floor int64
		want  string // in the error; "" for none
	}{
		{"fits", 10, 0, 1000, ""},
		{"memory floor", 300, 0, 1200, "floor of 1200 MiB"},
		{"exactly at the floor", 300, 0, 1000, ""},
		{"tasks", 20, 30000, 0, "kernel.pid_max"},
		{"zero", 0, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := r
			if tc.tasks > 0 {
				r.Tasks = tc.tasks
			}
			err := r.Fit(tc.n, c, tc.floor)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Fit(%d) = %v, want nil", tc.n, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Fit(%d) = %v, want an error naming %q", tc.n, err, tc.want)
			}
		})
	}
}
