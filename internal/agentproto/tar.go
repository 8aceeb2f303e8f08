package agentproto

import (
	"context"
	"io"

	"github.com/hashicorp/yamux"
)

// Ops of a directory's upload and download as a tar stream.
const (
	OpTarPut = "tar_put"
	OpTarGet = "tar_get"
)

// TarPutRequest extracts the tar stream the host sends as Data frames
// after the header into the directory Path, made (with its parents) if
// missing. Entries are owned by User ("": root).
type TarPutRequest struct {
	Path string `json:"path"`
	User string `json:"user,omitempty"`
}

// TarResult counts what an extraction wrote. Skipped counts the entries
// it does not make: device nodes, FIFOs and sockets.
type TarResult struct {
	Files    int64 `json:"files"`
	Dirs     int64 `json:"dirs"`
	Symlinks int64 `json:"symlinks"`
	Links    int64 `json:"links"` // hard links
	Skipped  int64 `json:"skipped"`
	Bytes    int64 `json:"bytes"` // of regular files' content
}

// TarGetRequest asks for the tree under the directory Path as a tar
// stream, which follows the Response as Data frames and an End frame.
type TarGetRequest struct {
	Path string `json:"path"`
}

// TarHandler carries out the tar calls on the guest side.
type TarHandler interface {
	// TarPut reads the tar stream from r; it must not return before it
	// has read r to EOF unless it fails.
	TarPut(ctx context.Context, req TarPutRequest, r io.Reader) (TarResult, error)
	// TarGet checks the request and returns what writes the tar stream;
	// an error it returns is the call's answer.
	TarGet(ctx context.Context, req TarGetRequest) (func(io.Writer) error, error)
}

// serveTar serves the tar ops.
func serveTar(h TarHandler) StreamServer {
	return func(ctx context.Context, st *yamux.Stream, op string, decode func(any) error) bool {
		switch op {
		case OpTarPut:
			var req TarPutRequest
			if err := decode(&req); err != nil {
				writeResponse(st, nil, err)
				return true
			}
			out, err := h.TarPut(ctx, req, NewDataReader(st))
			writeResponse(st, out, err)
		case OpTarGet:
			var req TarGetRequest
			if err := decode(&req); err != nil {
				writeResponse(st, nil, err)
				return true
			}
			serveTarGet(ctx, st, h, req)
		default:
			return false
		}
		return true
	}
}

func serveTarGet(ctx context.Context, st *yamux.Stream, h TarHandler, req TarGetRequest) {
	ctx, cancel := cancelOnHostClose(ctx, st)
	defer cancel()
	write, err := h.TarGet(ctx, req)
	if err != nil {
		writeResponse(st, nil, err)
		return
	}
	if err := writeResponse(st, struct{}{}, nil); err != nil {
		return
	}
	dw := NewDataWriter(st)
	if err := write(dw); err != nil {
		// Ending without the End frame tells the host the stream is cut short.
		return
	}
	dw.Close()
}

// cancelOnHostClose returns a context canceled when the host closes st or
// sends its End frame, as it does to stop a one-way stream.
func cancelOnHostClose(ctx context.Context, st io.Reader) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		discard := func([]byte) error { return nil }
		ReadHostFrames(st, discard, discard)
		cancel()
	}()
	return ctx, cancel
}

// TarPut sends the tar stream read from r to be extracted into a
// directory.
func (c *Client) TarPut(ctx context.Context, req TarPutRequest, r io.Reader) (TarResult, error) {
	var res TarResult
	err := c.sendContent(ctx, OpTarPut, req, r, &res)
	return res, err
}

// TarGet opens a directory's tree as a tar stream. The caller must close
// the reader; one that ends early reports io.ErrUnexpectedEOF.
func (c *Client) TarGet(ctx context.Context, req TarGetRequest) (io.ReadCloser, error) {
	cl, err := c.open(ctx, OpTarGet, req, nil)
	if err != nil {
		return nil, err
	}
	if err := c.answer(ctx, cl, OpTarGet, nil); err != nil {
		cl.close()
		return nil, err
	}
	return &contentReader{Reader: NewDataReader(cl.st), cl: cl, ctx: ctx, c: c}, nil
}
