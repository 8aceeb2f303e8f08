package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWriteContext: the context's tar leaves out what .dockerignore
// excludes (but never the Dockerfile or .dockerignore), and carries a
// Dockerfile from outside the context under the reserved name.
func TestWriteContext(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"Dockerfile": "FROM cove:default\n", ".dockerignore": "*.log\nnode_modules\nDockerfile\n!keep.log\n",
		"a.txt": "a", "x.log": "x", "keep.log": "k", "node_modules/m/i.js": "m", "src/b.txt": "b",
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "ci.Dockerfile")
	os.WriteFile(outside, []byte("FROM cove:default\nRUN true\n"), 0o644)
	for _, tc := range []struct {
		file, wantDF string
		want         []string
	}{
		{"", "Dockerfile", []string{".dockerignore", "Dockerfile", "a.txt", "keep.log", "src/", "src/b.txt"}},
		{outside, ".cove-build/Dockerfile", []string{".cove-build/Dockerfile", ".dockerignore", "a.txt", "keep.log", "src/", "src/b.txt"}},
	} {
		df, err := contextDockerfile(dir, tc.file)
		if err != nil || df != tc.wantDF {
			t.Fatalf("contextDockerfile(%q) = %q, %v; want %q", tc.file, df, err, tc.wantDF)
		}
		var buf bytes.Buffer
		if err := writeContext(&buf, dir, tc.file, df); err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, h.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, tc.want) {
			t.Errorf("-f %q: context %v, want %v", tc.file, names, tc.want)
		}
	}
}
