package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// fsTree makes, under the work dir: f (a file), d/g (a directory with a
// file), empty/ (an empty directory), and link, a symlink to outside, a
// directory beyond the work dir standing for the host, which holds a file.
func fsTree(t *testing.T, e *testEnv) (outside string) {
	t.Helper()
	outside = filepath.Join(filepath.Dir(e.dir), "outside")
	for _, d := range []string{filepath.Join(e.dir, "d"), filepath.Join(e.dir, "empty"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(e.dir, "f"), filepath.Join(e.dir, "d", "g"), filepath.Join(outside, "keep")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}
	return outside
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestStat(t *testing.T) {
	e := newTestEnv(t)
	outside := fsTree(t, e)
	tests := []struct {
		path, wantType, code string
	}{
		{"f", "file", ""},
		{"d", "dir", ""},
		{"link", "symlink", ""},
		{"link/", "symlink", ""}, // cleaned: the link itself
		{"nope", "", agentproto.CodeNotFound},
		{"f/x", "", agentproto.CodeInvalid},
		{"", "", agentproto.CodeInvalid},
		{"../outside", "", agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			fi, err := e.c.Stat(testCtx(t), agentproto.StatRequest{Path: tt.path})
			wantCode(t, err, tt.code)
			if tt.code == "" && fi.Type != tt.wantType {
				t.Errorf("type %q, want %q", fi.Type, tt.wantType)
			}
			if tt.wantType == "symlink" && fi.Target != outside {
				t.Errorf("target %q, want %q", fi.Target, outside)
			}
		})
	}
}

func TestMkdir(t *testing.T) {
	e := newTestEnv(t)
	fsTree(t, e)
	tests := []struct {
		name, path string
		mode       uint32
		wantMode   uint32
		code       string
	}{
		{"parents", "a/b/c", 0, 0o755, ""},
		{"existing dir", "d", 0, 0o755, ""},
		{"mode", "private", 0o700, 0o700, ""},
		{"mode past umask", "open", 0o777, 0o777, ""},
		{"over a file", "f", 0, 0, agentproto.CodeExists},
		{"under a file", "f/sub", 0, 0, agentproto.CodeInvalid},
		{"bad mode", "m", 0o10000, 0, agentproto.CodeInvalid},
		{"empty", "", 0, 0, agentproto.CodeInvalid},
		{"dotdot", "a/../../x", 0, 0, agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi, err := e.c.Mkdir(testCtx(t), agentproto.MkdirRequest{Path: tt.path, Mode: tt.mode})
			wantCode(t, err, tt.code)
			if tt.code != "" {
				return
			}
			if fi.Type != "dir" || fi.Mode != tt.wantMode || fi.Path != filepath.Join(e.dir, tt.path) {
				t.Errorf("info %+v, want a dir at %s with mode %#o", fi, tt.path, tt.wantMode)
			}
		})
	}
	if exists(filepath.Join(e.dir, "m")) || exists(filepath.Join(filepath.Dir(e.dir), "x")) {
		t.Error("a refused mkdir made a directory")
	}
}

func TestMove(t *testing.T) {
	tests := []struct {
		name, from, to string
		overwrite      bool
		code           string
		gone, there    []string // paths under the work dir after the call
	}{
		{"rename file", "f", "f2", false, "", []string{"f"}, []string{"f2"}},
		{"into dir", "f", "d/f", false, "", []string{"f"}, []string{"d/f", "d/g"}},
		{"dir", "d", "d2", false, "", []string{"d"}, []string{"d2/g"}},
		{"onto file refused", "f", "d/g", false, agentproto.CodeExists, nil, []string{"f", "d/g"}},
		{"onto file overwrite", "f", "d/g", true, "", []string{"f"}, []string{"d/g"}},
		{"onto empty dir refused", "d", "empty", false, agentproto.CodeExists, nil, []string{"d/g", "empty"}},
		{"dir onto empty dir overwrite", "d", "empty", true, "", []string{"d"}, []string{"empty/g"}},
		{"dir onto non-empty dir", "empty", "d", true, agentproto.CodeNotEmpty, nil, []string{"empty", "d/g"}},
		{"file onto dir", "f", "empty", true, agentproto.CodeIsDir, nil, []string{"f", "empty"}},
		{"dir into itself", "d", "d/sub", false, agentproto.CodeInvalid, nil, []string{"d/g"}},
		{"missing source", "nope", "x", false, agentproto.CodeNotFound, []string{"x"}, nil},
		{"missing parent", "f", "no/such/f", false, agentproto.CodeNotFound, nil, []string{"f"}},
		{"same path", "f", "f", false, "", nil, []string{"f"}},
		{"the link, not its target", "link", "moved", false, "", []string{"link"}, []string{"moved"}},
		{"onto the link", "f", "link", true, "", nil, []string{"link"}},
		{"dotdot from", "../outside/keep", "x", false, agentproto.CodeInvalid, []string{"x"}, nil},
		{"dotdot to", "f", "../escaped", false, agentproto.CodeInvalid, nil, []string{"f"}},
		{"empty from", "", "x", false, agentproto.CodeInvalid, nil, nil},
		{"empty to", "f", "", false, agentproto.CodeInvalid, nil, []string{"f"}},
		{"the work dir", ".", "elsewhere", false, agentproto.CodeInvalid, nil, []string{"f"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t)
			outside := fsTree(t, e)
			fi, err := e.c.Move(testCtx(t), agentproto.MoveRequest{From: tt.from, To: tt.to, Overwrite: tt.overwrite})
			wantCode(t, err, tt.code)
			if tt.code == "" && fi.Path != filepath.Join(e.dir, tt.to) {
				t.Errorf("path %q, want the target", fi.Path)
			}
			for _, p := range tt.gone {
				if exists(filepath.Join(e.dir, p)) {
					t.Errorf("%s still exists", p)
				}
			}
			for _, p := range tt.there {
				if !exists(filepath.Join(e.dir, p)) {
					t.Errorf("%s is missing", p)
				}
			}
			// Whatever the call did, the directory standing for the host
			// is as it was, and a moved link still points there.
			if !exists(filepath.Join(outside, "keep")) || exists(filepath.Join(filepath.Dir(e.dir), "escaped")) {
				t.Error("the call reached outside the work dir")
			}
			if tt.name == "onto the link" {
				if fi, err := os.Lstat(filepath.Join(e.dir, "link")); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("the link was not replaced by the file: %v", err)
				}
				if fi, err := os.Lstat(outside); err != nil || !fi.IsDir() {
					t.Errorf("the link's target changed: %v", err)
				}
			}
		})
	}
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name, path string
		recursive  bool
		code       string
		gone       []string
	}{
		{"file", "f", false, "", []string{"f"}},
		{"empty dir", "empty", false, "", []string{"empty"}},
		{"non-empty dir refused", "d", false, agentproto.CodeNotEmpty, nil},
		{"non-empty dir recursive", "d", true, "", []string{"d", "d/g"}},
		{"the link", "link", false, "", []string{"link"}},
		{"the link, recursive", "link", true, "", []string{"link"}},
		{"the link with a slash", "link/", true, "", []string{"link"}},
		{"missing", "nope", true, agentproto.CodeNotFound, nil},
		{"empty path", "", true, agentproto.CodeInvalid, nil},
		{"dotdot", "../outside", true, agentproto.CodeInvalid, nil},
		{"the work dir", ".", true, agentproto.CodeInvalid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t)
			outside := fsTree(t, e)
			err := e.c.Remove(testCtx(t), agentproto.RemoveRequest{Path: tt.path, Recursive: tt.recursive})
			wantCode(t, err, tt.code)
			for _, p := range tt.gone {
				if exists(filepath.Join(e.dir, p)) {
					t.Errorf("%s still exists", p)
				}
			}
			if tt.code != "" {
				for _, p := range []string{"f", "d/g", "empty", "link"} {
					if !exists(filepath.Join(e.dir, p)) {
						t.Errorf("a refused remove took %s", p)
					}
				}
			}
			if !exists(filepath.Join(outside, "keep")) {
				t.Error("the remove followed the link outside the work dir")
			}
		})
	}
}

// TestRemoveTreeWithLinks removes a tree holding a symlink to outside it:
// the link goes, what it points to stays.
func TestRemoveTreeWithLinks(t *testing.T) {
	e := newTestEnv(t)
	outside := fsTree(t, e)
	if err := os.Symlink(outside, filepath.Join(e.dir, "d", "inner")); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Remove(testCtx(t), agentproto.RemoveRequest{Path: "d", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(e.dir, "d")) || !exists(filepath.Join(outside, "keep")) {
		t.Error("want d gone and the link's target kept")
	}
}

func TestPutSHA256(t *testing.T) {
	e := newTestEnv(t)
	data := bytes.Repeat([]byte("cove"), 300_000)
	sum := sha256.Sum256(data)
	fi, err := e.c.Put(testCtx(t), agentproto.PutRequest{Path: "h"}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(sum[:]); fi.SHA256 != want || fi.Size != int64(len(data)) {
		t.Errorf("sha256 %s size %d, want %s and %d", fi.SHA256, fi.Size, want, len(data))
	}
	fi, err = e.c.Put(testCtx(t), agentproto.PutRequest{Path: "empty"}, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if fi.SHA256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("sha256 of nothing %s", fi.SHA256)
	}
}

// TestCheckMutable checks the refusal of the root and the work dir on its
// own: these tests run the agent on the host, where a call on / must never
// be tried.
func TestCheckMutable(t *testing.T) {
	a := &Agent{workDir: "/work"} // New would make the dir
	for p, refused := range map[string]bool{"/": true, "/work": true, "/work/x": false, "/tmp": false} {
		if err := a.checkMutable(p, "remove"); (err != nil) != refused || (refused && agentproto.CodeOf(err) != agentproto.CodeInvalid) {
			t.Errorf("checkMutable(%s) = %v, want refused %v", p, err, refused)
		}
	}
}

func TestFSOpErrorCodes(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code string
	}{
		{&fs.PathError{Op: "rmdir", Path: "/x", Err: errors.New("x")}, agentproto.CodeInternal},
		{&fs.PathError{Op: "rmdir", Path: "/x", Err: fs.ErrNotExist}, agentproto.CodeNotFound},
		{&os.LinkError{Op: "rename", Old: "a", New: "b", Err: os.ErrExist}, agentproto.CodeExists},
	} {
		if got := agentproto.CodeOf(fsOpError(tt.err)); got != tt.code {
			t.Errorf("fsOpError(%v) code %q, want %q", tt.err, got, tt.code)
		}
	}
}
