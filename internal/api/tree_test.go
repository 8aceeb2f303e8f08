package api

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// TestTreeRoutes drives the tar and watch routes through pkg/client: a
// round trip, a watch's records, and the statuses of refusals.
func TestTreeRoutes(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	cl := client.New(s.url, testKey)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o600, Size: 5})
	tw.Write([]byte("hello"))
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f"})
	tw.Close()
	res, err := cl.PutTar(ctx, sb.ID, sb.Token, "tree", bytes.NewReader(buf.Bytes()), "")
	if err != nil || res.Files != 1 || res.Symlinks != 1 || res.Bytes != 5 || res.Path != "tree" {
		t.Fatalf("PutTar = %+v, %v", res, err)
	}
	rc, err := cl.GetTar(ctx, sb.ID, sb.Token, "tree")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(rc)
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
	if strings.Join(names, " ") != "d/ d/f l" {
		t.Errorf("GetTar names %v", names)
	}

	wctx, wcancel := context.WithCancel(ctx)
	var got []string
	err = cl.Watch(wctx, sb.ID, sb.Token, "tree", true, func(ev apitype.WatchEvent) error {
		got = append(got, ev.Type+" "+ev.Path[strings.LastIndex(ev.Path, "/")+1:])
		switch ev.Type {
		case apitype.WatchReady:
			if _, err := cl.PutFile(ctx, sb.ID, sb.Token, "tree/d/new", 0o644, strings.NewReader("x"), 1); err != nil {
				t.Error(err)
			}
		case apitype.WatchCreate, apitype.WatchRename:
			if strings.HasSuffix(ev.Path, "/new") {
				wcancel()
			}
		}
		return nil
	})
	wcancel()
	if err != nil || len(got) < 2 || got[0] != "ready tree" {
		t.Errorf("Watch = %v, events %v", err, got)
	}

}

// TestTreeRoutesRefused checks the statuses of the tree routes' refusals.
func TestTreeRoutesRefused(t *testing.T) {
	s := newServer(t)
	sb := s.create(t)
	cl := client.New(s.url, testKey)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.PutFile(ctx, sb.ID, sb.Token, "tree/d/f", 0o644, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	escaping := func() io.Reader {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644})
		tw.Close()
		return &b
	}
	noop := func(apitype.WatchEvent) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
		want *client.Error
	}{
		{"escaping entry", func() error { _, err := cl.PutTar(ctx, sb.ID, sb.Token, "t", escaping(), ""); return err }(), client.ErrBadRequest},
		{"tar onto a file", func() error { _, err := cl.PutTar(ctx, sb.ID, sb.Token, "tree/d/f", escaping(), ""); return err }(), client.ErrBadRequest},
		{"get a missing dir", func() error { _, err := cl.GetTar(ctx, sb.ID, sb.Token, "nope"); return err }(), client.ErrNotFound},
		{"get a file", func() error { _, err := cl.GetTar(ctx, sb.ID, sb.Token, "tree/d/f"); return err }(), client.ErrBadRequest},
		{"watch a missing dir", cl.Watch(ctx, sb.ID, sb.Token, "nope", false, noop), client.ErrNotFound},
		{"watch a file", cl.Watch(ctx, sb.ID, sb.Token, "tree/d/f", false, noop), client.ErrBadRequest},
		{"watch ..", cl.Watch(ctx, sb.ID, sb.Token, "../etc", false, noop), client.ErrBadRequest},
		{"watch, bad recursive", rawStatus(t, s, "/v1/sandboxes/"+sb.ID+"/watch?path=tree&recursive=maybe", sb), client.ErrBadRequest},
		{"watch, no token", cl.Watch(ctx, sb.ID, "", "tree", false, noop), client.ErrForbidden},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

// rawStatus GETs path and returns its error as the client would.
func rawStatus(t *testing.T, s *testServer, path string, sb apitype.SandboxInfo) error {
	resp, _ := s.doString(t, "GET", path, "", tok(sb))
	if resp.StatusCode == http.StatusBadRequest {
		return client.ErrBadRequest
	}
	return nil
}
