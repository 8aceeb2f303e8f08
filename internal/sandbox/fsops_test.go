package sandbox

import (
	"strings"
	"testing"
)

// TestFSOps runs each file system call through the service to a real agent
// and checks the sentinels its errors map onto.
func TestFSOps(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	fi, err := sb.Put(ctx, PutRequest{Path: "a/b/c/f"}, strings.NewReader("hello"))
	if err != nil || fi.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Fatalf("Put = %+v, %v; want the sha256 of hello", fi, err)
	}
	if fi, err := sb.Mkdir(ctx, MkdirRequest{Path: "x/y", Mode: 0o700}); err != nil || fi.Type != "dir" || fi.Mode != 0o700 {
		t.Errorf("Mkdir = %+v, %v", fi, err)
	}
	if fi, err := sb.Stat(ctx, "a/b/c/f"); err != nil || fi.Type != "file" || fi.Size != 5 || fi.SHA256 != "" {
		t.Errorf("Stat = %+v, %v", fi, err)
	}
	if _, err := sb.Put(ctx, PutRequest{Path: "x/g"}, strings.NewReader("g")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"move onto a file", func() error { _, err := sb.Move(ctx, MoveRequest{From: "a/b/c/f", To: "x/g"}); return err }, ErrConflict},
		{"remove a non-empty dir", func() error { return sb.Remove(ctx, RemoveRequest{Path: "a"}) }, ErrConflict},
		{"mkdir over a file", func() error { _, err := sb.Mkdir(ctx, MkdirRequest{Path: "x/g"}); return err }, ErrConflict},
		{"stat a missing path", func() error { _, err := sb.Stat(ctx, "nope"); return err }, ErrNotFound},
		{"stat ..", func() error { _, err := sb.Stat(ctx, "../etc"); return err }, ErrInvalid},
		{"move to ..", func() error { _, err := sb.Move(ctx, MoveRequest{From: "x/g", To: "../g"}); return err }, ErrInvalid},
		{"remove empty path", func() error { return sb.Remove(ctx, RemoveRequest{}) }, ErrInvalid},
		{"mkdir bad mode", func() error { _, err := sb.Mkdir(ctx, MkdirRequest{Path: "m", Mode: 0o17777}); return err }, ErrInvalid},
		{"move, overwriting", func() error {
			_, err := sb.Move(ctx, MoveRequest{From: "a/b/c/f", To: "x/g", Overwrite: true})
			return err
		}, nil},
		{"remove, recursive", func() error { return sb.Remove(ctx, RemoveRequest{Path: "a", Recursive: true}) }, nil},
		{"stat the removed", func() error { _, err := sb.Stat(ctx, "a"); return err }, ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, tc.want)
		})
	}
}
