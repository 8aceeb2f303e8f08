package agentproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/hashicorp/yamux"
)

// Handler carries out calls on the guest side.
type Handler interface {
	Ping(ctx context.Context) (PingResult, error)
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	Eval(ctx context.Context, req EvalRequest) (EvalResult, error)
	// Put reads the file's content from r; it must not return before it has
	// read r to EOF unless it fails.
	Put(ctx context.Context, req PutRequest, r io.Reader) (FileInfo, error)
	Get(ctx context.Context, req GetRequest) (FileInfo, io.ReadCloser, error)
	List(ctx context.Context, req ListRequest) (ListResult, error)
	Wait(ctx context.Context, req WaitRequest) (WaitResult, error)
	Warm(ctx context.Context) error
	Restored(ctx context.Context, req RestoredRequest) error
	FSHandler
	PTYHandler
	ProcHandler
	TarHandler
	WatchHandler
	ExecStreamHandler
}

// Serve accepts connections from l and serves each with h until ctx is done
// or l fails. The host may connect again at any time (after a daemon restart
// or a restore), so every connection gets its own session.
func Serve(ctx context.Context, l net.Listener, h Handler, log *slog.Logger) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	ss := &sessions{all: map[*yamux.Session]struct{}{}}
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		go func() {
			if err := serveConn(ctx, conn, h, ss); err != nil && !errors.Is(err, io.EOF) {
				log.Debug("agent connection ended", "remote", conn.RemoteAddr(), "err", err)
			}
		}()
	}
}

// ServeConn serves one host connection until it closes.
func ServeConn(ctx context.Context, conn net.Conn, h Handler) error {
	return serveConn(ctx, conn, h, nil)
}

// serveConn serves conn as one of ss, if not nil.
func serveConn(ctx context.Context, conn net.Conn, h Handler, ss *sessions) error {
	bc := newBatchConn(conn)
	sess, err := yamux.Server(bc, muxConfig())
	if err != nil {
		bc.Close()
		return err
	}
	defer sess.Close()
	if ss != nil {
		ss.add(sess)
		defer ss.remove(sess)
		ctx = context.WithValue(ctx, sessionKey{}, session{ss, sess})
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return err
		}
		go serveStream(ctx, st, h)
	}
}

func serveStream(ctx context.Context, st *yamux.Stream, h Handler) {
	defer st.Close()
	hdr, ok := readHeader(st)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	decode := bodyDecoder(hdr.Op, hdr.Body)
	switch hdr.Op {
	case OpPut:
		var req PutRequest
		var out any
		err := decode(&req)
		if err == nil {
			out, err = h.Put(ctx, req, NewDataReader(st))
		}
		writeResponse(st, out, err)
		return
	case OpGet:
		var req GetRequest
		if err := decode(&req); err != nil {
			writeResponse(st, nil, err)
			return
		}
		serveGet(ctx, st, h, req)
		return
	}
	for _, serve := range streamServers(h) {
		if serve(ctx, st, hdr.Op, decode) {
			return
		}
	}
	// Calls without uploaded content watch the stream: the host closes it
	// to cancel, which ends a running command.
	go func() {
		var b [1]byte
		st.Read(b[:])
		cancel()
	}()
	out, handled, err := serveCall(ctx, h, hdr.Op, decode)
	if !handled {
		out, handled, err = serveFS(ctx, h, hdr.Op, decode)
	}
	if !handled {
		err = Errorf(CodeInvalid, "unknown op %q", hdr.Op)
	}
	writeResponse(st, out, err)
}

// readHeader reads a call's Header. One over the frame limit is read to
// its end rather than leave the host's write blocked on a full window,
// and refused with the reason.
func readHeader(st *yamux.Stream) (Header, bool) {
	var hdr Header
	err := ReadJSON(st, &hdr)
	var big *frameTooLarge
	if errors.As(err, &big) {
		if _, err := io.CopyN(io.Discard, st, int64(big.size)); err == nil {
			writeResponse(st, nil, Errorf(CodeTooLarge, "%v", big))
		}
	}
	return hdr, err == nil
}

// serveCall serves op if it is one of the calls with a JSON answer and
// no content; handled is false for any other op.
func serveCall(ctx context.Context, h Handler, op string, decode func(any) error) (out any, handled bool, err error) {
	switch op {
	case OpPing:
		out, err = h.Ping(ctx)
	case OpExec:
		var req ExecRequest
		if err = decode(&req); err == nil {
			out, err = h.Exec(ctx, req)
		}
	case OpEval:
		var req EvalRequest
		if err = decode(&req); err == nil {
			out, err = h.Eval(ctx, req)
		}
	case OpList:
		var req ListRequest
		if err = decode(&req); err == nil {
			out, err = h.List(ctx, req)
		}
	case OpWait:
		var req WaitRequest
		if err = decode(&req); err == nil {
			out, err = h.Wait(ctx, req)
		}
	case OpWarm:
		out, err = struct{}{}, h.Warm(ctx)
	case OpRestored:
		var req RestoredRequest
		if err = decode(&req); err == nil {
			out, err = struct{}{}, h.Restored(ctx, req)
		}
		if err == nil {
			closeOtherSessions(ctx)
		}
	default:
		return nil, false, nil
	}
	return out, true, err
}

// streamServers are the servers of the streaming ops, each concern's in
// its own file.
func streamServers(h Handler) []StreamServer {
	return []StreamServer{serveLane(h), serveExecStream(h), ptyServer(h), procServer(h), serveTar(h), serveWatch(h)}
}

func serveGet(ctx context.Context, st *yamux.Stream, h Handler, req GetRequest) {
	info, rc, err := h.Get(ctx, req)
	if err != nil {
		writeResponse(st, nil, err)
		return
	}
	defer rc.Close()
	if err := writeResponse(st, info, nil); err != nil {
		return
	}
	dw := NewDataWriter(st)
	if _, err := io.Copy(dw, rc); err != nil {
		// Ending without the End frame tells the host the content is cut short.
		return
	}
	dw.Close()
}

// bodyDecoder decodes a call's body.
func bodyDecoder(op string, body json.RawMessage) func(any) error {
	return func(v any) error {
		if len(body) == 0 {
			return nil
		}
		if err := json.Unmarshal(body, v); err != nil {
			return Errorf(CodeInvalid, "malformed %s request: %v", op, err)
		}
		return nil
	}
}

func writeResponse(w io.Writer, out any, err error) error {
	return writeJSONFrame(w, answerFrame(nil, out, err))
}

// answerFrame encodes a call's answer: a Response, or with id a lane's
// answer. A body is already JSON: it is wrapped by hand rather than
// validated and copied again by a second Marshal, which doubled the cost
// of a large answer (exec output). An answer over the frame limit becomes
// an error.
func answerFrame(id *uint64, out any, err error) []byte {
	var e *Error
	if err != nil {
		if !errors.As(err, &e) {
			e = &Error{Code: CodeInternal, Message: err.Error()}
		}
	} else if raw, merr := json.Marshal(out); merr != nil {
		e = &Error{Code: CodeInternal, Message: merr.Error()}
	} else {
		b := wrapAnswer(id, "body", raw)
		if len(b) <= maxJSONFrame {
			return b
		}
		e = &Error{Code: CodeInternal, Message: fmt.Sprintf("the answer is too large to send: %v: %d bytes, over the limit of %d", ErrFrameTooLarge, len(b), maxJSONFrame)}
	}
	eb, _ := json.Marshal(e)
	return wrapAnswer(id, "error", eb)
}

// wrapAnswer is {"id":ID,"KEY":RAW}, without the id when it is nil.
func wrapAnswer(id *uint64, key string, raw []byte) []byte {
	b := make([]byte, 0, len(raw)+len(key)+32)
	b = append(b, '{')
	if id != nil {
		b = append(strconv.AppendUint(append(b, `"id":`...), *id, 10), ',')
	}
	b = append(append(append(append(b, '"'), key...), `":`...), raw...)
	return append(b, '}')
}

// sessions are the host connections one Serve serves. After a restore,
// every one of them but the connection its Restored call came on is from
// before the checkpoint, to a host end that is gone: closing them at once
// hangs up what they held (a terminal, a follow) without waiting for a
// keepalive to find them dead.
type sessions struct {
	mu  sync.Mutex
	all map[*yamux.Session]struct{}
}

func (ss *sessions) add(s *yamux.Session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.all[s] = struct{}{}
}

func (ss *sessions) remove(s *yamux.Session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.all, s)
}

// closeOthers closes every session but keep.
func (ss *sessions) closeOthers(keep *yamux.Session) {
	ss.mu.Lock()
	var others []*yamux.Session
	for s := range ss.all {
		if s != keep {
			others = append(others, s)
		}
	}
	ss.mu.Unlock()
	for _, s := range others {
		s.Close()
	}
}

// sessionKey is the context key of the session a call came on.
type sessionKey struct{}

type session struct {
	set  *sessions
	sess *yamux.Session
}

// closeOtherSessions closes the sessions other than the one ctx's call came
// on, when it came through Serve.
func closeOtherSessions(ctx context.Context) {
	if s, ok := ctx.Value(sessionKey{}).(session); ok {
		s.set.closeOthers(s.sess)
	}
}
