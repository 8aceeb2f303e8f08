package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// testUser is an unprivileged account every Debian host has, in its
// /etc/passwd as in the sandbox's.
const testUser = "nobody"

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (runs commands as another user)")
		}
		t.Skip("needs root (runs commands as another user)")
	}
}

func TestExecAsUser(t *testing.T) {
	needRoot(t)
	e := newTestEnv(t)
	ctx := testCtx(t)
	tests := []struct {
		name string
		req  agentproto.ExecRequest
		want string
	}{
		{"ids and login env", agentproto.ExecRequest{User: testUser, Cwd: "/",
			Shell: `echo "$(id -u) $(id -un) $USER $LOGNAME $HOME"`}, "65534 nobody nobody nobody /nonexistent"},
		{"the request's env wins", agentproto.ExecRequest{User: testUser, Cwd: "/",
			Shell: `echo "$HOME"`, Env: []string{"HOME=/tmp"}}, "/tmp"},
		{"root by name", agentproto.ExecRequest{User: "root", Cwd: "/", Shell: `echo "$(id -u) $USER"`}, "0 root"},
		{"root by default", agentproto.ExecRequest{Cwd: "/", Shell: `id -u`}, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.c.Exec(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(res.Stdout); got != tt.want || res.ExitCode != 0 {
				t.Errorf("stdout %q exit %d (stderr %q), want %q", got, res.ExitCode, res.Stderr, tt.want)
			}
		})
	}
}

func TestPutAsUser(t *testing.T) {
	needRoot(t)
	e := newTestEnv(t)
	ctx := testCtx(t)
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, agentproto.PutRequest{Path: "new/dir/f", Mode: 0o4755, User: testUser}, bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"new", "new/dir", "new/dir/f"} {
		fi, err := os.Lstat(filepath.Join(e.dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
			t.Errorf("%s: uid %d, want 65534", p, st.Uid)
		}
	}
	// The mode is set after the chown, which would clear a set-id bit.
	if fi, _ := os.Stat(filepath.Join(e.dir, "new/dir/f")); fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("mode %v lost its setuid bit", fi.Mode())
	}
	// The work dir existed already: it stays root's.
	if fi, _ := os.Stat(e.dir); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("an existing parent changed owner")
	}
}

func TestUnknownUser(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	for _, name := range []string{"nobody-here-cove", "bad:name", strings.Repeat("u", 40)} {
		_, err := e.c.Exec(ctx, agentproto.ExecRequest{User: name, Shell: "true"})
		wantCode(t, err, agentproto.CodeInvalid)
		_, err = e.c.Put(ctx, agentproto.PutRequest{Path: "f-" + name[:3], User: name}, bytes.NewReader(nil))
		wantCode(t, err, agentproto.CodeInvalid)
	}
	_, err := e.c.Exec(ctx, agentproto.ExecRequest{User: "nobody-here-cove", Shell: "true"})
	if !strings.Contains(err.Error(), "no user nobody-here-cove in the sandbox") {
		t.Errorf("error %q does not name the user", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "f-nob")); err == nil {
		t.Error("a put for an unknown user wrote a file")
	}
}
