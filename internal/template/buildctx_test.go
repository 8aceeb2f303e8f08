package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"slices"
	"strings"
	"testing"
)

// tarOf makes a tar stream of name → content ("/" suffix: a directory).
func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, files[name])
	}
	tw.Close()
	return &buf
}

func names(t *testing.T, c *Context, cs copySet) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.writeTar(&buf, cs); err != nil {
		t.Fatal(err)
	}
	var out []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		out = append(out, h.Name+"="+string(b))
	}
	return out
}

func TestContextCopy(t *testing.T) {
	files := map[string]string{
		"Dockerfile": "FROM cove:default\n", ".dockerignore": "secret*\nbuild/\n!build/keep.txt\n",
		"a.txt": "a", "secret.key": "no", "src/": "", "src/main.py": "print(1)", "src/lib/x.py": "x",
		"build/out.o": "o", "build/keep.txt": "k",
	}
	c, err := ReadContext(tarOf(t, files), t.TempDir(), "Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if string(c.Dockerfile()) != files["Dockerfile"] {
		t.Errorf("dockerfile %q", c.Dockerfile())
	}
	for _, tc := range []struct {
		name    string
		step    Step
		dir     string
		want    []string
		wantErr string
	}{
		{"file to file", Step{Sources: []string{"a.txt"}, Dest: "/opt/b.txt"}, "/opt", []string{"b.txt=a"}, ""},
		{"file into dir", Step{Sources: []string{"a.txt"}, Dest: "/opt/"}, "/opt", []string{"a.txt=a"}, ""},
		{"dir contents", Step{Sources: []string{"src"}, Dest: "/app"}, "/app", []string{"lib/x.py=x", "main.py=print(1)"}, ""},
		{"glob", Step{Sources: []string{"src/*.py"}, Dest: "/app/"}, "/app", []string{"main.py=print(1)"}, ""},
		{"ignored", Step{Line: 4, Sources: []string{"secret.key"}, Dest: "/x"}, "", nil, "line 4: COPY source secret.key: no such file"},
		{"re-included", Step{Sources: []string{"build/keep.txt"}, Dest: "/k"}, "/", []string{"k=k"}, ""},
		{"ignored under dir", Step{Sources: []string{"build/out.o"}, Dest: "/o"}, "", nil, "no such file"},
		{"several need a dir", Step{Sources: []string{"a.txt", "src"}, Dest: "/x"}, "", nil, "ending in /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := c.resolveCopy(tc.step)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cs.dir != tc.dir {
				t.Errorf("dir %q, want %q", cs.dir, tc.dir)
			}
			if got := names(t, c, cs); !slices.Equal(got, tc.want) {
				t.Errorf("entries %v, want %v", got, tc.want)
			}
		})
	}
}

// TestContextDigest: a COPY's key changes with what it copies, not with
// what it leaves out.
func TestContextDigest(t *testing.T) {
	digest := func(files map[string]string) string {
		c, err := ReadContext(tarOf(t, files), t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs, err := c.resolveCopy(Step{Sources: []string{"src"}, Dest: "/app"})
		if err != nil {
			t.Fatal(err)
		}
		return cs.digest()
	}
	base := digest(map[string]string{"src/a": "1", "other": "x"})
	if digest(map[string]string{"src/a": "1", "other": "y"}) != base {
		t.Error("a file the COPY does not take changed its key")
	}
	if digest(map[string]string{"src/a": "2", "other": "x"}) == base {
		t.Error("a copied file's content did not change the key")
	}
}

func TestContextRefusesEscapes(t *testing.T) {
	if _, err := ReadContext(tarOf(t, map[string]string{"../evil": "x"}), t.TempDir(), ""); err == nil {
		t.Fatal("an entry outside the context was taken")
	}
	if _, err := ReadContext(strings.NewReader("not a tar stream at all, no no no"), t.TempDir(), ""); err == nil {
		t.Fatal("a corrupt context was taken")
	}
	c, err := ReadContext(nil, t.TempDir(), "")
	if err != nil {
		t.Fatalf("empty context: %v", err)
	}
	c.Close()
}

// TestContextAddArchive: ADD extracts a tar archive (plain or gzip) of the
// context into the destination; COPY copies it as a file.
func TestContextAddArchive(t *testing.T) {
	inner := tarOf(t, map[string]string{"pkg/": "", "pkg/x.txt": "x"}).Bytes()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(inner)
	zw.Close()
	c, err := ReadContext(tarOf(t, map[string]string{"a.tar": string(inner), "a.tgz": gz.String(), "plain.txt": strings.Repeat("not a tar ", 80)}), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		step Step
		want []string
	}{
		{Step{Sources: []string{"a.tar"}, Dest: "/opt", Unpack: true}, []string{"pkg/=", "pkg/x.txt=x"}},
		{Step{Sources: []string{"a.tgz"}, Dest: "/opt/", Unpack: true}, []string{"pkg/=", "pkg/x.txt=x"}},
		{Step{Sources: []string{"plain.txt"}, Dest: "/opt/p.txt", Unpack: true}, []string{"p.txt=" + strings.Repeat("not a tar ", 80)}},
		{Step{Sources: []string{"a.tgz"}, Dest: "/opt/a.tgz"}, []string{"a.tgz=" + gz.String()}},
	} {
		cs, err := c.resolveCopy(tc.step)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(t, c, cs); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.step, got, tc.want)
		}
	}
}
