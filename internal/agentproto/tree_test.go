package agentproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

func (stubHandler) TarPut(_ context.Context, req TarPutRequest, r io.Reader) (TarResult, error) {
	if req.Path == "bad" {
		return TarResult{}, Errorf(CodeInvalid, "refused")
	}
	n, err := io.Copy(io.Discard, r)
	return TarResult{Bytes: n}, err
}

func (stubHandler) TarGet(_ context.Context, req TarGetRequest) (func(io.Writer) error, error) {
	if req.Path == "missing" {
		return nil, Errorf(CodeNotFound, "no %s", req.Path)
	}
	return func(w io.Writer) error {
		_, err := io.Copy(w, strings.NewReader(strings.Repeat("t", 3*ChunkSize+5)))
		return err
	}, nil
}

func (stubHandler) Watch(ctx context.Context, req WatchRequest, ready func() error, emit func(WatchEvent) error) error {
	if req.Path == "missing" {
		return Errorf(CodeNotFound, "no %s", req.Path)
	}
	if err := ready(); err != nil {
		return err
	}
	for _, typ := range []string{WatchReady, WatchCreate, WatchRemove} {
		if err := emit(WatchEvent{Type: typ, Path: req.Path}); err != nil {
			return err
		}
	}
	if req.Recursive { // stays open until the host goes
		<-ctx.Done()
		return nil
	}
	return nil
}

// TestTar checks that a tar stream goes both ways in Data frames, and
// that refusals carry their codes.
func TestTar(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, stubHandler{}) })
	ctx := boundedCtx(t)
	body := bytes.Repeat([]byte("x"), 2*ChunkSize+7)
	if res, err := c.TarPut(ctx, TarPutRequest{Path: "d"}, bytes.NewReader(body)); err != nil || res.Bytes != int64(len(body)) {
		t.Errorf("TarPut = %+v, %v; want %d bytes", res, err, len(body))
	}
	if _, err := c.TarPut(ctx, TarPutRequest{Path: "bad"}, bytes.NewReader(body)); CodeOf(err) != CodeInvalid {
		t.Errorf("TarPut(bad) = %v, want code %s", err, CodeInvalid)
	}
	rc, err := c.TarGet(ctx, TarGetRequest{Path: "d"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n != 3*ChunkSize+5 {
		t.Errorf("TarGet read %d, %v", n, err)
	}
	if _, err := c.TarGet(ctx, TarGetRequest{Path: "missing"}); CodeOf(err) != CodeNotFound {
		t.Errorf("TarGet(missing) = %v, want code %s", err, CodeNotFound)
	}
}

// TestWatch checks a watch's records, its end, its refusal, and that
// closing it ends a watch that would go on.
func TestWatch(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, stubHandler{}) })
	ctx := boundedCtx(t)
	if _, err := c.Watch(ctx, WatchRequest{Path: "missing"}); CodeOf(err) != CodeNotFound {
		t.Errorf("Watch(missing) = %v, want code %s", err, CodeNotFound)
	}
	for _, recursive := range []bool{false, true} {
		w, err := c.Watch(ctx, WatchRequest{Path: "d", Recursive: recursive})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 3 {
			ev, err := w.Next()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Type)
		}
		if strings.Join(got, ",") != "ready,create,remove" {
			t.Errorf("events %v", got)
		}
		if !recursive {
			if _, err := w.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("after the last event: %v, want EOF", err)
			}
		}
		w.Close()
	}
}
