package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestTreeCalls runs a tar round trip and a watch through the service to
// a real agent, and checks the sentinels of their refusals.
func TestTreeCalls(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("hi"))
	tw.Close()
	res, err := sb.PutTar(ctx, TarPutRequest{Path: "tree"}, bytes.NewReader(buf.Bytes()))
	if err != nil || res.Files != 1 || res.Bytes != 2 {
		t.Fatalf("PutTar = %+v, %v", res, err)
	}
	rc, err := sb.GetTar(ctx, "tree")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	rc.Close()
	if len(names) != 2 || names[1] != "d/f" {
		t.Errorf("GetTar names %v", names)
	}

	w, err := sb.Watch(ctx, WatchRequest{Path: "tree", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Next(); err != nil || ev.Type != WatchReady {
		t.Errorf("first event %+v, %v", ev, err)
	}
	w.Close()

	for name, err := range map[string]error{
		"tar into ..": func() error { _, err := sb.PutTar(ctx, TarPutRequest{Path: "../x"}, &buf); return err }(),
		"tar escaping": func() error {
			_, err := sb.PutTar(ctx, TarPutRequest{Path: "t"}, bytes.NewReader(escapingTar(t)))
			return err
		}(),
		"get a missing":   func() error { _, err := sb.GetTar(ctx, "nope"); return err }(),
		"watch a missing": func() error { _, err := sb.Watch(ctx, WatchRequest{Path: "nope"}); return err }(),
		"watch a file":    func() error { _, err := sb.Watch(ctx, WatchRequest{Path: "tree/d/f"}); return err }(),
		"tar as a nobody": func() error { _, err := sb.PutTar(ctx, TarPutRequest{Path: "t", User: "no such"}, &buf); return err }(),
	} {
		want := ErrInvalid
		if name == "get a missing" || name == "watch a missing" {
			want = ErrNotFound
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
}

func escapingTar(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
