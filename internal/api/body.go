package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// defaultBodyIdle is how long a request body may stall before the
// connection is cut, unless Config.BodyIdleTimeout says otherwise.
const defaultBodyIdle = 30 * time.Second

// idleBody bounds how long a request body may stall. http.Server's
// ReadTimeout would bound the whole body, which cuts a long upload at full
// speed; this sets the connection's read deadline afresh before each read,
// so only a client that stops sending is cut. Once the body is read the
// deadline is lifted: the server's background read, which notices a client
// that goes away during a long exec, must not time out.
type idleBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	idle    time.Duration
	stalled atomic.Bool
}

// watchBody gives r's body an idle deadline. The first is set now, for
// handlers that answer without reading the body: the server still reads
// (a little of) it before it answers.
func watchBody(w http.ResponseWriter, r *http.Request, idle time.Duration) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	b := &idleBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: idle}
	b.extend()
	r.Body = b
}

func (b *idleBody) extend() {
	// HTTP/2 and test recorders may not support deadlines; nothing to do.
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.extend()
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline stays passed, so the server gives up on the rest.
		b.stalled.Store(true)
	}
	return n, err
}

// bodyStalled reports whether r's body was cut for stalling.
func bodyStalled(r *http.Request) bool {
	b, ok := r.Body.(*idleBody)
	return ok && b.stalled.Load()
}
