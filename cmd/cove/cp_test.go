package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCp(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		src, dst string
		want     cpArgs
		wantErr  string
	}{
		{"upload", "f.txt", "sb1:/work/f.txt", cpArgs{upload: true, id: "sb1", remote: "/work/f.txt", local: "f.txt"}, ""},
		{"upload relative", "./a/f.txt", "sb1:sub/g", cpArgs{upload: true, id: "sb1", remote: "sub/g", local: "./a/f.txt"}, ""},
		{"upload into dir", "a/f.txt", "sb1:/tmp/", cpArgs{upload: true, id: "sb1", remote: "/tmp/f.txt", local: "a/f.txt"}, ""},
		{"upload to workdir", "a/f.txt", "sb1:", cpArgs{upload: true, id: "sb1", remote: "f.txt", local: "a/f.txt"}, ""},
		{"upload stdin", "-", "sb1:x", cpArgs{upload: true, id: "sb1", remote: "x", local: "-"}, ""},
		{"upload stdin needs name", "-", "sb1:", cpArgs{}, "name the file"},
		{"local path with colon", "./a:b", "sb1:x", cpArgs{upload: true, id: "sb1", remote: "x", local: "./a:b"}, ""},
		{"absolute local with colon", "/tmp/a:b", "sb1:x", cpArgs{upload: true, id: "sb1", remote: "x", local: "/tmp/a:b"}, ""},
		{"download", "sb1:/work/out.log", "out.log", cpArgs{id: "sb1", remote: "/work/out.log", local: "out.log"}, ""},
		{"download stdout", "sb1:out.log", "-", cpArgs{id: "sb1", remote: "out.log", local: "-"}, ""},
		{"download into dir", "sb1:/a/b.bin", dir, cpArgs{id: "sb1", remote: "/a/b.bin", local: filepath.Join(dir, "b.bin")}, ""},
		{"download into dir/", "sb1:b.bin", "x/", cpArgs{id: "sb1", remote: "b.bin", local: filepath.Join("x", "b.bin")}, ""},
		{"download a dir", "sb1:/work/", "x", cpArgs{}, "cove cp -r"},
		{"download nothing", "sb1:", "x", cpArgs{}, "cove cp -r"},
		{"both remote", "sb1:a", "sb2:b", cpArgs{}, "both"},
		{"neither remote", "a", "b", cpArgs{}, "ID:PATH"},
		{"slash before colon is local", "dir/a:b", "c", cpArgs{}, "ID:PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCp(tt.src, tt.dst)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
