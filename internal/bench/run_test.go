package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/fakedaemon"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestRun checks a whole run against a fake daemon: the report names the
// daemon's accelerator as Info gives it, has the rows asked for, and is
// the same JSON on out and in the file.
func TestRun(t *testing.T) {
	for _, tt := range []struct {
		info apitype.Info
		want string // accel
	}{
		{apitype.Info{Version: "test", Backend: "qemu", Accel: "kvm"}, "kvm"},
		{apitype.Info{Version: "test", Backend: "qemu", Accel: "tcg"}, "tcg"},
		{apitype.Info{Version: "test", Backend: "gvisor"}, ""},
	} {
		fake := fakedaemon.New()
		fake.Info = tt.info
		srv := httptest.NewServer(fake)
		o := Options{Creates: 2, Execs: 3, JSON: true, Out: filepath.Join(t.TempDir(), "bench.json")}
		var out, log bytes.Buffer
		err := Run(context.Background(), client.New(srv.URL, "key"), o, &out, &log)
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tt.want, err, log.String())
		}
		var rep report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Accel != tt.want || rep.Backend != tt.info.Backend {
			t.Errorf("accel %q, backend %q; want %q, %q", rep.Accel, rep.Backend, tt.want, tt.info.Backend)
		}
		if len(rep.Results) != 2 || rep.Results[0].Name != "create" || rep.Results[0].N != 2 || rep.Results[1].Name != "exec" || rep.Results[1].N != 3 {
			t.Errorf("results %+v", rep.Results)
		}
		if file, err := os.ReadFile(o.Out); err != nil || !bytes.Equal(file, out.Bytes()) {
			t.Errorf("--out file differs from the JSON printed (%v)", err)
		}
		if left := fake.Sandboxes(); len(left) != 0 {
			t.Errorf("left behind %v", left)
		}
	}
}

// TestRunFailed checks that a failed row makes Run fail, naming it, after
// the report.
func TestRunFailed(t *testing.T) {
	srv := httptest.NewServer(fakedaemon.New())
	defer srv.Close()
	var out, log bytes.Buffer
	// The fake has no eval, nor ping.
	err := Run(context.Background(), client.New(srv.URL, "key"), Options{Evals: 1}, &out, &log)
	if err == nil || err.Error() != "failed: eval, ping" {
		t.Errorf("err = %v", err)
	}
	if !strings.Contains(out.String(), "eval: ") {
		t.Errorf("no table with the error:\n%s", out.String())
	}
}
