package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cove-sandbox/cove/internal/e2b/pb/filesystem"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// filesystemService is filesystem.Filesystem over cove's fs calls and
// watches.
type filesystemService struct {
	s *Server
}

// homeOf is where a user's relative paths and commands start, as under
// envd; "" (the sandbox's own default user) is cove's work directory,
// which cove itself resolves relative paths against.
func homeOf(user string) string {
	switch user {
	case "":
		return ""
	case "root":
		return "/root"
	}
	return "/home/" + user
}

// resolvePath makes a request's path absolute: relative paths and ~ start
// at home, as envd expands them. With no home they are left relative, for
// cove to resolve against its work directory.
func resolvePath(p, home string) (string, error) {
	switch {
	case p == "":
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("path is empty"))
	case p == "~":
		p = "."
	case strings.HasPrefix(p, "~/"):
		p = p[2:]
	}
	if path.IsAbs(p) || home == "" {
		return path.Clean(p), nil
	}
	return path.Join(home, p), nil
}

// entryInfo is an EntryInfo of cove's FileInfo.
func entryInfo(fi apitype.FileInfo) *filesystem.EntryInfo {
	perm, _ := apitype.ParseMode(fi.Mode)
	mode := fs.FileMode(perm)
	e := &filesystem.EntryInfo{Name: path.Base(fi.Path), Path: fi.Path, Size: fi.Size}
	switch fi.Type {
	case "dir":
		e.Type, mode = filesystem.FileType_FILE_TYPE_DIRECTORY, mode|fs.ModeDir
	case "symlink":
		e.Type, mode, e.IsSymlink = filesystem.FileType_FILE_TYPE_SYMLINK, mode|fs.ModeSymlink, true
		if fi.Target != "" {
			t := fi.Target
			e.SymlinkTarget = &t
		}
	default:
		e.Type = filesystem.FileType_FILE_TYPE_FILE
	}
	e.Mode, e.Permissions = uint32(mode), mode.String()
	e.ModifiedTime = timestamppb.New(time.Unix(fi.MtimeUnix, 0))
	return e
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := resolvePath(req.Msg.GetPath(), t.home)
	if err != nil {
		return nil, err
	}
	fi, err := t.c.Stat(ctx, t.id, t.token, p)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(fi)}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := resolvePath(req.Msg.GetPath(), t.home)
	if err != nil {
		return nil, err
	}
	// envd says already_exists (the SDK's makeDir answers false); cove's
	// mkdir takes an existing directory as done.
	switch fi, err := t.c.Stat(ctx, t.id, t.token, p); {
	case err == nil:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s exists already (%s)", p, fi.Type))
	case !errors.Is(err, client.ErrNotFound):
		return nil, toConnect(err)
	}
	fi, err := t.c.MakeDir(ctx, t.id, t.token, p, 0)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(fi)}), nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	from, err := resolvePath(req.Msg.GetSource(), t.home)
	if err != nil {
		return nil, err
	}
	to, err := resolvePath(req.Msg.GetDestination(), t.home)
	if err != nil {
		return nil, err
	}
	// envd renames over an existing target, as rename(2) does.
	fi, err := t.c.Move(ctx, t.id, t.token, from, to, true)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(fi)}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := resolvePath(req.Msg.GetPath(), t.home)
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	res, err := t.c.ListFiles(ctx, t.id, t.token, p, depth)
	if err != nil {
		return nil, toConnect(err)
	}
	// cove lists a file as itself; envd refuses a path that is not a
	// directory.
	if len(res.Entries) == 1 && res.Entries[0].Path == p && res.Entries[0].Type != "dir" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", p))
	}
	out := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, 0, len(res.Entries))}
	for _, e := range res.Entries {
		out.Entries = append(out.Entries, entryInfo(e))
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := resolvePath(req.Msg.GetPath(), t.home)
	if err != nil {
		return nil, err
	}
	if err := t.c.Remove(ctx, t.id, t.token, p, true); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// fsEvent maps one of cove's watch events onto envd's, its name relative
// to the watched directory; ok is false for events envd has no word for.
func fsEvent(root string, ev apitype.WatchEvent) (*filesystem.FilesystemEvent, bool) {
	var typ filesystem.EventType
	switch ev.Type {
	case apitype.WatchCreate:
		typ = filesystem.EventType_EVENT_TYPE_CREATE
	case apitype.WatchWrite:
		typ = filesystem.EventType_EVENT_TYPE_WRITE
	case apitype.WatchRemove:
		typ = filesystem.EventType_EVENT_TYPE_REMOVE
	case apitype.WatchRename:
		typ = filesystem.EventType_EVENT_TYPE_RENAME
	case apitype.WatchChmod:
		typ = filesystem.EventType_EVENT_TYPE_CHMOD
	default:
		return nil, false
	}
	name := ev.Path
	if rel, ok := strings.CutPrefix(ev.Path, strings.TrimSuffix(root, "/")+"/"); ok {
		name = rel
	}
	return &filesystem.FilesystemEvent{Name: name, Type: typ}, true
}

// withEntry adds the entry's info to a create, write or chmod event when
// asked (0.6.3's includeEntry) and the path can still be stat'ed.
func withEntry(ctx context.Context, t target, root string, ev apitype.WatchEvent, fe *filesystem.FilesystemEvent) {
	if fe.Type == filesystem.EventType_EVENT_TYPE_REMOVE || fe.Type == filesystem.EventType_EVENT_TYPE_RENAME {
		return
	}
	p := ev.Path
	if !path.IsAbs(p) {
		p = path.Join(root, p)
	}
	if fi, err := t.c.Stat(ctx, t.id, t.token, p); err == nil {
		fe.Entry = entryInfo(fi)
	}
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return err
	}
	root, err := resolvePath(req.Msg.GetPath(), t.home)
	if err != nil {
		return err
	}
	snd := &sender[filesystem.WatchDirResponse]{send: stream.Send}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	started := false
	err = t.c.Watch(ctx, t.id, t.token, root, req.Msg.GetRecursive(), func(ev apitype.WatchEvent) error {
		if ev.Type == apitype.WatchReady {
			started = true
			go keepalive(kctx, t.keepalive, snd, func() *filesystem.WatchDirResponse {
				return &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}
			})
			return snd.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}})
		}
		fe, ok := fsEvent(root, ev)
		if !ok {
			return nil
		}
		if req.Msg.GetIncludeEntry() {
			withEntry(ctx, t, root, ev, fe)
		}
		return snd.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: fe}})
	})
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, client.ErrWatchEnded):
		return nil // the directory went: the stream ends, as envd's does
	case errors.Is(err, client.ErrBadRequest) && !started:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory: %w", root, err))
	}
	return toConnect(err)
}

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	root, err := resolvePath(req.Msg.GetPath(), t.home)
	if err != nil {
		return nil, err
	}
	id, err := f.s.w.start(ctx, f.s.base, t, root, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	evs, err := f.s.w.take(t, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: evs}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	t, err := f.s.targetOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := f.s.w.remove(t, req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
