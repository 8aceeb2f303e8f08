package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSandboxTokens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cove")
	st := &sandboxTokens{path: filepath.Join(dir, "tokens.json")}
	const d1, d2 = "http://a:8080", "http://b:8080"

	if tok, err := st.get(d1, "x"); err != nil || tok != "" {
		t.Fatalf("empty store: get = %q, %v", tok, err)
	}
	if err := st.add(d1, map[string]string{"s1": "t1", "s2": "t2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.add(d2, map[string]string{"s1": "other"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ daemon, id, want string }{
		{d1, "s1", "t1"}, {d1, "s2", "t2"}, {d2, "s1", "other"}, {d2, "s2", ""},
	} {
		if got, err := st.get(c.daemon, c.id); err != nil || got != c.want {
			t.Errorf("get(%s, %s) = %q, %v; want %q", c.daemon, c.id, got, err, c.want)
		}
	}

	fi, err := os.Stat(st.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}

	if err := st.remove(d1, "s1", "unknown"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.get(d1, "s1"); got != "" {
		t.Errorf("s1 still there after remove: %q", got)
	}
	if got, _ := st.get(d1, "s2"); got != "t2" {
		t.Errorf("remove took s2 too: %q", got)
	}

	// prune keeps what's live and what was saved after the list.
	asOf := time.Now()
	time.Sleep(2 * time.Millisecond)
	if err := st.add(d1, map[string]string{"new": "tn"}); err != nil {
		t.Fatal(err)
	}
	if err := st.prune(d1, map[string]bool{"live": true}, asOf); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.get(d1, "s2"); got != "" {
		t.Errorf("prune kept dead s2")
	}
	if got, _ := st.get(d1, "new"); got != "tn" {
		t.Errorf("prune dropped a token saved after the list")
	}
	if got, _ := st.get(d2, "s1"); got != "other" {
		t.Errorf("prune touched another daemon")
	}

	// No temporary files are left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "tokens.json" && e.Name() != "tokens.json.lock" {
			t.Errorf("stray file %s", e.Name())
		}
	}
}

func TestSandboxTokensConcurrentAdds(t *testing.T) {
	st := &sandboxTokens{path: filepath.Join(t.TempDir(), "tokens.json")}
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := "s" + string(rune('a'+i))
			if err := st.add("d", map[string]string{id: "t" + id}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tf, err := st.read()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tf.Daemons["d"]); got != n {
		t.Errorf("%d tokens kept of %d added concurrently", got, n)
	}
}

func TestSandboxTokensCorrupt(t *testing.T) {
	st := &sandboxTokens{path: filepath.Join(t.TempDir(), "tokens.json")}
	os.WriteFile(st.path, []byte("{not json"), 0o600)
	if _, err := st.get("d", "s"); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("get on a corrupt store: %v", err)
	}
}

func TestDefaultSandboxTokensXDG(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/xdg")
	st, err := defaultSandboxTokens()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("/xdg", "cove", "tokens.json"); st.path != want {
		t.Errorf("path = %s, want %s", st.path, want)
	}
}

func TestSandboxTokenFor(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	st, _ := defaultSandboxTokens()
	st.add("http://d", map[string]string{"s1": "stored"})

	t.Setenv("COVE_SANDBOX_TOKEN", "")
	if got, err := sandboxTokenFor("", "http://d", "s1"); err != nil || got != "stored" {
		t.Errorf("from store: %q, %v", got, err)
	}
	if _, err := sandboxTokenFor("", "http://d", "s2"); err == nil || !strings.Contains(err.Error(), "--sandbox-token") {
		t.Errorf("unknown sandbox: %v", err)
	}
	t.Setenv("COVE_SANDBOX_TOKEN", "env")
	if got, _ := sandboxTokenFor("", "http://d", "s1"); got != "env" {
		t.Errorf("env override: %q", got)
	}
	if got, _ := sandboxTokenFor("flag", "http://d", "s1"); got != "flag" {
		t.Errorf("flag override: %q", got)
	}
}
