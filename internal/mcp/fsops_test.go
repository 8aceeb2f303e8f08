package mcp

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func conflict(what string) error {
	return &client.Error{Status: http.StatusConflict, Code: apitype.CodeConflict, Message: what}
}

func (f *fakeAPI) Stat(ctx context.Context, id, token, path string) (apitype.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.FileInfo{}, err
	}
	if b, ok := sb.files[path]; ok {
		return apitype.FileInfo{Path: path, Type: "file", Size: int64(len(b)), Mode: "0644"}, nil
	}
	if sb.dirs[path] {
		return apitype.FileInfo{Path: path, Type: "dir", Mode: "0755"}, nil
	}
	return apitype.FileInfo{}, notFound(path)
}

func (f *fakeAPI) MakeDir(ctx context.Context, id, token, path string, mode fs.FileMode) (apitype.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.FileInfo{}, err
	}
	if _, ok := sb.files[path]; ok {
		return apitype.FileInfo{}, conflict(path + " exists and is not a directory")
	}
	if sb.dirs == nil {
		sb.dirs = make(map[string]bool)
	}
	sb.dirs[path] = true
	return apitype.FileInfo{Path: path, Type: "dir", Mode: fmt.Sprintf("%04o", mode)}, nil
}

func (f *fakeAPI) Move(ctx context.Context, id, token, from, to string, overwrite bool) (apitype.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return apitype.FileInfo{}, err
	}
	b, ok := sb.files[from]
	if !ok {
		return apitype.FileInfo{}, notFound(from)
	}
	if _, ok := sb.files[to]; ok && !overwrite {
		return apitype.FileInfo{}, conflict("rename " + from + " " + to + ": file exists: pass overwrite to replace it")
	}
	delete(sb.files, from)
	sb.files[to] = b
	return apitype.FileInfo{Path: to, Type: "file", Size: int64(len(b))}, nil
}

func (f *fakeAPI) Remove(ctx context.Context, id, token, path string, recursive bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.open(id, token)
	if err != nil {
		return err
	}
	if _, ok := sb.files[path]; ok {
		delete(sb.files, path)
		return nil
	}
	if !sb.dirs[path] {
		return notFound(path)
	}
	for p := range sb.files {
		if strings.HasPrefix(p, path+"/") {
			if !recursive {
				return conflict(path + ": directory not empty: remove it with recursive")
			}
			delete(sb.files, p)
		}
	}
	delete(sb.dirs, path)
	return nil
}

func TestFSTools(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{}, false))
	ref := func(kv ...any) map[string]any {
		m := map[string]any{"sandbox_id": sb.ID}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	fi := decode[FileInfo](t, call(t, cs, "make_dir", ref("path", "d", "mode", "0700"), false))
	if fi.Type != "dir" || fi.Mode != "0700" {
		t.Errorf("make_dir = %+v", fi)
	}
	call(t, cs, "write_file", ref("path", "d/a", "content", "hello"), false)
	call(t, cs, "write_file", ref("path", "b", "content", "bee"), false)
	if fi := decode[FileInfo](t, call(t, cs, "stat_file", ref("path", "d/a"), false)); fi.Type != "file" || fi.Size != 5 {
		t.Errorf("stat_file = %+v", fi)
	}

	// Refusals say what to do next, and change nothing.
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"stat_file", ref("path", ""), "path is empty"},
		{"stat_file", ref("path", "nope"), "not found"},
		{"make_dir", ref("path", "x", "mode", "rw"), "not an octal permission mode"},
		{"make_dir", ref("path", "b"), "not a directory"},
		{"move_file", ref("from", "d/a", "to", ""), "give both from"},
		{"move_file", ref("from", "d/a", "to", "b"), "overwrite"},
		{"remove_file", ref("path", "d"), "recursive"},
		{"remove_file", ref("path", ""), "path is empty"},
		{"remove_file", map[string]any{"sandbox_id": sb.ID, "sandbox_token": "wrong", "path": "b"}, "token"},
	} {
		res := call(t, cs, tc.tool, tc.args, true)
		if !strings.Contains(text(res), tc.want) {
			t.Errorf("%s %v: %q, want it to say %q", tc.tool, tc.args, text(res), tc.want)
		}
	}
	if len(f.sandboxes[sb.ID].files) != 2 {
		t.Errorf("files after refusals: %v", f.sandboxes[sb.ID].files)
	}

	if fi := decode[FileInfo](t, call(t, cs, "move_file", ref("from", "d/a", "to", "b", "overwrite", true), false)); fi.Path != "b" || fi.Size != 5 {
		t.Errorf("move_file = %+v", fi)
	}
	call(t, cs, "write_file", ref("path", "d/c", "content", "c"), false)
	if out := decode[removeOut](t, call(t, cs, "remove_file", ref("path", "d", "recursive", true), false)); out.Removed != "d" {
		t.Errorf("remove_file = %+v", out)
	}
	call(t, cs, "stat_file", ref("path", "d"), true)
}
