package agent

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// FuzzResolve: a path the agent resolves is absolute and clean, with no
// "..", a relative one lands under the work directory, and with the
// default work directory the agent and the daemon's check agree.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"a", "a/b/../c", "..", "../../etc", "/etc/passwd", ".", "./", "x\x00", "//", "a//b/./", "..a/b.."} {
		f.Add(s)
	}
	work := &Agent{workDir: "/srv/work"}
	def := &Agent{workDir: agentproto.WorkDir}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := work.resolve(p)
		if err != nil {
			return
		}
		if !path.IsAbs(got) || filepath.Clean(got) != got || strings.Contains(got, "\x00") {
			t.Fatalf("resolve(%q) = %q: not absolute and clean", p, got)
		}
		for _, el := range strings.Split(got, "/") {
			if el == ".." {
				t.Fatalf("resolve(%q) = %q has '..'", p, got)
			}
		}
		if !path.IsAbs(p) && got != work.workDir && !strings.HasPrefix(got, work.workDir+"/") {
			t.Fatalf("relative %q resolved to %q, outside %s", p, got, work.workDir)
		}
		d, err := def.resolve(p)
		if want, werr := agentproto.ResolvePath(p); err != nil || werr != nil || d != want {
			t.Fatalf("agent resolves %q to %q (%v), the daemon to %q (%v)", p, d, err, want, werr)
		}
	})
}

// FuzzMkdirRelative makes directories from fuzzed relative paths in a
// fresh work directory: nothing appears beside it.
func FuzzMkdirRelative(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a/../../y", "./c", "d/./e/", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if path.IsAbs(p) || len(p) > 200 {
			return // an absolute path is the sandbox's to choose
		}
		base := t.TempDir()
		a := &Agent{workDir: filepath.Join(base, "work")}
		if err := os.Mkdir(a.workDir, 0o755); err != nil {
			t.Fatal(err)
		}
		a.Mkdir(context.Background(), agentproto.MkdirRequest{Path: p, Mode: 0o700})
		entries, err := os.ReadDir(base)
		if err != nil || len(entries) != 1 || entries[0].Name() != "work" {
			t.Fatalf("mkdir %q: %s holds %v (%v)", p, base, entries, err)
		}
	})
}
