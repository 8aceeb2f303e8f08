package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// maxRecord bounds one streamed record: a chunk of output (a quarter MiB
// of bytes, escaped or in base64) with room to spare.
const maxRecord = 4 << 20

// eachRecord calls each with every record of a streamed answer, NDJSON
// lines or server-sent events' data, until the body ends or each fails.
// A body that is neither is an error.
func eachRecord(resp *http.Response, each func(line []byte) error) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	sse := mt == apitype.ContentTypeSSE
	if !sse && mt != apitype.ContentTypeNDJSON {
		return fmt.Errorf("cove: the daemon answered %q, not a stream: is it older than this client?", mt)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxRecord)
	for sc.Scan() {
		line := sc.Bytes()
		if sse {
			var ok bool
			if line, ok = bytes.CutPrefix(line, []byte("data: ")); !ok {
				continue // the blank line between events, or a comment
			}
		}
		if len(line) == 0 {
			continue
		}
		if err := each(line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("cove: read the stream: %w", err)
	}
	return nil
}
