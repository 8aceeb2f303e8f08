package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/fakedaemon"
	"github.com/cove-sandbox/cove/pkg/client"
)

// fakeRestarter records what the restart benchmark asks of the daemon.
type fakeRestarter struct {
	restarts int
	killed   []string
}

func (r *fakeRestarter) Restart(ctx context.Context, whileDown func()) (time.Time, error) {
	r.restarts++
	whileDown()
	return time.Now(), nil
}

func (r *fakeRestarter) KillSandbox(id string) int {
	r.killed = append(r.killed, id)
	return 1
}

func TestRunRestart(t *testing.T) {
	fake := fakedaemon.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cl := client.New(srv.URL, "key")

	// With a daemon the bench may restart: one restart, with the asked
	// number of sandboxes killed while it was down, and two rows.
	r := &fakeRestarter{}
	var out, log bytes.Buffer
	if err := Run(context.Background(), cl, Options{RestartDead: 3, Restarter: r, JSON: true}, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range rep.Results {
		names = append(names, res.Name)
		if res.N != 1 || res.Error != "" {
			t.Errorf("row %+v", res)
		}
	}
	if !slices.Equal(names, []string{"restart_healthz", "restart_recovered"}) {
		t.Errorf("rows %v", names)
	}
	if r.restarts != 1 || len(r.killed) != 3 {
		t.Errorf("%d restarts, killed %v; want 1 and 3 sandboxes", r.restarts, r.killed)
	}
	if left := fake.Sandboxes(); len(left) != 0 {
		t.Errorf("left behind %v", left)
	}

	// Without one, the user's daemon is never killed: no rows, and the
	// log says why.
	out.Reset()
	log.Reset()
	if err := Run(context.Background(), cl, Options{RestartDead: 3, JSON: true}, &out, &log); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "restart_") || !strings.Contains(log.String(), "restart: skipped") {
		t.Errorf("restart without a Restarter: report %s, log %s", out.String(), log.String())
	}
}
