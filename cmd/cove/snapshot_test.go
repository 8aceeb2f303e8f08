package main

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func TestSnapshotSpawnBranchCLI(t *testing.T) {
	fake := newSnapFake()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_TOKEN", "key") // the API key's old name
	t.Setenv("COVE_API_KEY", "")
	run := func(args ...string) (string, error) { return runCLI(t, args...) }
	st, _ := defaultSandboxTokens()

	out, err := run("snapshot", "build", "py", "--warm", "true", "--pool-size", "0")
	if err != nil || !strings.Contains(out, "TAG") || !strings.Contains(out, "py") {
		t.Fatalf("snapshot build: %q, %v", out, err)
	}
	if _, err := run("snapshot", "build", "py"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "hint") {
		t.Errorf("building a tag twice: %v", err)
	}

	out, err = run("spawn", "py", "-n", "2", "-q")
	ids := strings.Fields(out)
	if err != nil || len(ids) != 2 {
		t.Fatalf("spawn -q: %q, %v", out, err)
	}
	for _, id := range ids {
		if tok, _ := st.get(srv.URL, id); tok != "tok-"+id {
			t.Errorf("spawn did not save the token of %s: %q", id, tok)
		}
	}
	if _, err := run("spawn", "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("spawn from a missing snapshot: %v", err)
	}
	if _, err := run("spawn", "py", "-n", "0"); err == nil {
		t.Error("spawn -n 0 succeeded")
	}

	out, err = run("branch", ids[0], "-n", "2", "--tag", "b1")
	if err != nil || !strings.Contains(out, "snapshot  b1 (depth 1, branched from "+ids[0]+", spawned from py)") ||
		!strings.Contains(out, "paused    42.0 ms") || strings.Count(out, "sb-") != 3 {
		t.Errorf("branch: %q, %v", out, err)
	}
	for _, id := range []string{"sb-3", "sb-4"} {
		if tok, _ := st.get(srv.URL, id); tok != "tok-"+id {
			t.Errorf("branch did not save the token of child %s: %q", id, tok)
		}
	}
	out, err = run("branch", "--json", ids[0], "--tag", "b2")
	var br apitype.BranchResponse
	if err != nil || json.Unmarshal([]byte(out), &br) != nil || br.Tag != "b2" || br.PauseMs != 42 {
		t.Errorf("branch --json: %q, %v", out, err)
	}

	out, err = run("snapshot", "ls", "-q")
	if err != nil || out != "b1\nb2\npy\n" {
		t.Errorf("snapshot ls -q: %q, %v", out, err)
	}
	out, err = run("snapshot", "ls")
	if err != nil || !strings.Contains(out, "CHILDREN") || !strings.Contains(out, ids[0]+"@py") {
		t.Errorf("snapshot ls: %q, %v", out, err)
	}

	// py has children alive: rm refuses, saying what to do; b2 goes.
	out, err = run("snapshot", "rm", "b2", "py")
	if err == nil || out != "removed b2\n" {
		t.Errorf("snapshot rm b2 py: %q, %v", out, err)
	}
	out, err = run("snapshot", "rm", "--json", "py")
	if err == nil || !strings.Contains(out, `"removed": false`) || !strings.Contains(out, "IMAGE@py") {
		t.Errorf("snapshot rm --json of a used snapshot: %q, %v", out, err)
	}

	// Spawning from the branch takes its source's token, which branch
	// remembered; so does a snapshot saved without children.
	if out, err := run("spawn", "b1", "-q"); err != nil || strings.Count(out, "sb-") != 1 {
		t.Errorf("spawn from a branch: %q, %v", out, err)
	}
	if out, err := run("snapshot", "save", ids[1], "saved"); err != nil || !strings.Contains(out, "saved") {
		t.Errorf("snapshot save: %q, %v", out, err)
	}
	if out, err := run("create", "--snapshot", "saved", "-q"); err != nil || strings.Count(out, "sb-") != 1 {
		t.Errorf("create from a saved snapshot: %q, %v", out, err)
	}
	// Another user's cove knows no token for either.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	if _, err := run("spawn", "b1"); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "--sandbox-token") {
		t.Errorf("spawn from a branch without its token: %v", err)
	}
	if _, err := run("branch", ids[0]); err == nil || !strings.Contains(err.Error(), "--sandbox-token") {
		t.Errorf("branch without the sandbox's token: %v", err)
	}
	if _, err := run("spawn", "b1", "-q", "--sandbox-token", "tok-"+ids[0]); err != nil {
		t.Errorf("spawn from a branch with --sandbox-token: %v", err)
	}
	if _, err := run("snapshot", "frobnicate"); exitCode(err) != 2 {
		t.Errorf("unknown subcommand: %v", err)
	}
}
