package agentproto

import (
	"context"
	"net"
	"testing"
)

func (stubHandler) Stat(_ context.Context, req StatRequest) (FileInfo, error) {
	if req.Path == "missing" {
		return FileInfo{}, Errorf(CodeNotFound, "no %s", req.Path)
	}
	return FileInfo{Path: req.Path, Type: "file"}, nil
}
func (stubHandler) Mkdir(_ context.Context, req MkdirRequest) (FileInfo, error) {
	return FileInfo{Path: req.Path, Type: "dir", Mode: req.Mode}, nil
}
func (stubHandler) Move(_ context.Context, req MoveRequest) (FileInfo, error) {
	if !req.Overwrite {
		return FileInfo{}, Errorf(CodeExists, "%s exists", req.To)
	}
	return FileInfo{Path: req.To}, nil
}
func (stubHandler) Remove(_ context.Context, req RemoveRequest) error {
	if !req.Recursive {
		return Errorf(CodeNotEmpty, "%s is not empty", req.Path)
	}
	return nil
}

// TestFSOps checks that each file system call carries its request and its
// answer or error code across the protocol.
func TestFSOps(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, func(conn net.Conn) { ServeConn(context.Background(), conn, stubHandler{}) })
	ctx := boundedCtx(t)
	if fi, err := c.Stat(ctx, StatRequest{Path: "a"}); err != nil || fi.Path != "a" {
		t.Errorf("Stat = %+v, %v", fi, err)
	}
	if _, err := c.Stat(ctx, StatRequest{Path: "missing"}); CodeOf(err) != CodeNotFound {
		t.Errorf("Stat(missing) = %v, want code %s", err, CodeNotFound)
	}
	if fi, err := c.Mkdir(ctx, MkdirRequest{Path: "d", Mode: 0o700}); err != nil || fi.Mode != 0o700 {
		t.Errorf("Mkdir = %+v, %v", fi, err)
	}
	if _, err := c.Move(ctx, MoveRequest{From: "a", To: "b"}); CodeOf(err) != CodeExists {
		t.Errorf("Move = %v, want code %s", err, CodeExists)
	}
	if fi, err := c.Move(ctx, MoveRequest{From: "a", To: "b", Overwrite: true}); err != nil || fi.Path != "b" {
		t.Errorf("Move(overwrite) = %+v, %v", fi, err)
	}
	if err := c.Remove(ctx, RemoveRequest{Path: "d"}); CodeOf(err) != CodeNotEmpty {
		t.Errorf("Remove = %v, want code %s", err, CodeNotEmpty)
	}
	if err := c.Remove(ctx, RemoveRequest{Path: "d", Recursive: true}); err != nil {
		t.Errorf("Remove(recursive) = %v", err)
	}
}
