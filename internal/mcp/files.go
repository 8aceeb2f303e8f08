package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/internal/outtext"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

const (
	// maxRead caps the bytes one read_file call returns.
	maxRead = 64 << 10
	// maxImage caps an image returned whole, as image content: larger
	// ones would crowd a model's context anyway.
	maxImage = 4 << 20
	// maxEntries caps the entries list_files returns.
	maxEntries = 1000
)

type writeIn struct {
	DataRef
	Path     string `json:"path" jsonschema:"file path; relative paths are under /work"`
	Content  string `json:"content" jsonschema:"the file's content: text, or base64 when encoding is base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (the default) or base64, for binary data"`
	Mode     string `json:"mode,omitempty" jsonschema:"octal permission bits such as 0755; default 0644"`
	User     string `json:"user,omitempty" jsonschema:"the account that owns the file: root or user; empty: the sandbox's default user"`
}

// FileInfo describes a file in a sandbox.
type FileInfo = apitype.FileInfo

func (s *Server) writeFile(ctx context.Context, req *sdk.CallToolRequest, in writeIn) (*sdk.CallToolResult, FileInfo, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, FileInfo{}, err
	}
	if in.Path == "" {
		return nil, FileInfo{}, errors.New("path is empty: give the file's path, e.g. /work/main.py")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "text", "utf-8", "utf8":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(in.Content)); err != nil {
			return nil, FileInfo{}, fmt.Errorf("content is not valid standard base64 (%v): encode the bytes with padding, or send text with encoding=text", err)
		}
	default:
		return nil, FileInfo{}, fmt.Errorf("encoding %q: use text or base64", in.Encoding)
	}
	mode := fs.FileMode(0o644)
	if in.Mode != "" {
		m, err := apitype.ParseMode(in.Mode)
		if err != nil {
			return nil, FileInfo{}, err
		}
		mode = fs.FileMode(m)
	}
	info, err := s.apiOf(ctx).PutFileAs(ctx, in.SandboxID, token, in.Path, mode, in.User, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, FileInfo{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, info, nil
}

type readIn struct {
	DataRef
	Path   string `json:"path" jsonschema:"file path; relative paths are under /work"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at; default 0"`
	Limit  int    `json:"limit,omitempty" jsonschema:"most bytes to return; default and maximum 65536"`
}

type readOut struct {
	Path       string `json:"path"`
	Size       int64  `json:"size" jsonschema:"the file's total size in bytes"`
	Offset     int64  `json:"offset"`
	Length     int    `json:"length" jsonschema:"bytes returned"`
	EOF        bool   `json:"eof" jsonschema:"the end of the file was reached"`
	NextOffset int64  `json:"next_offset,omitempty" jsonschema:"pass this as offset to read on; absent at the end"`
	MimeType   string `json:"mime_type"`
	Encoding   string `json:"encoding" jsonschema:"text, base64, or image (the image is returned as an image content block, not in content)"`
	Content    string `json:"content"`
	Note       string `json:"note,omitempty"`
}

func (s *Server) readFile(ctx context.Context, req *sdk.CallToolRequest, in readIn) (*sdk.CallToolResult, readOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, readOut{}, err
	}
	if in.Path == "" {
		return nil, readOut{}, errors.New("path is empty: give the file's path; list_files shows what exists")
	}
	if in.Offset < 0 || in.Limit < 0 {
		return nil, readOut{}, errors.New("offset and limit must not be negative")
	}
	limit := in.Limit
	if limit == 0 || limit > maxRead {
		limit = maxRead
	}
	// From the start, the whole-file download is read only as far as
	// needed: unlike a range, which is of the size the file reports, it
	// also reads files whose size reads as 0, such as those in /proc. Past
	// the start, a range at a time. Either way one byte more than asked
	// tells whether the file goes on.
	var rc io.ReadCloser
	var fi apitype.FileInfo
	if in.Offset == 0 {
		rc, fi, err = s.apiOf(ctx).GetFile(ctx, in.SandboxID, token, in.Path)
	} else {
		rc, fi, err = s.apiOf(ctx).GetFileRange(ctx, in.SandboxID, token, in.Path, in.Offset, int64(limit)+1)
	}
	if err != nil {
		return nil, readOut{}, s.explain(ctx, err, in.SandboxID)
	}
	// Closing early cuts a big download short, which is the point.
	defer rc.Close()

	out := readOut{Path: in.Path, Size: fi.Size, Offset: in.Offset, MimeType: mime.TypeByExtension(path.Ext(in.Path))}
	if isImage(out.MimeType) && in.Offset == 0 && in.Limit == 0 && fi.Size >= 0 && fi.Size <= maxImage {
		return readImage(rc, out)
	}
	// One byte more than asked tells whether the file goes on when the
	// daemon sent no size.
	buf := make([]byte, limit+1)
	n, err := io.ReadFull(rc, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, readOut{}, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	out.EOF = n <= limit
	chunk := buf[:min(n, limit)]
	if !out.EOF {
		chunk = wholeRunes(chunk)
	}
	if out.EOF && out.Size < in.Offset+int64(len(chunk)) {
		out.Size = in.Offset + int64(len(chunk)) // no size sent, or one that reads as 0
	}
	out.Length = len(chunk)
	if !out.EOF {
		out.NextOffset = in.Offset + int64(len(chunk))
	}
	text := utf8.Valid(chunk) && bytes.IndexByte(chunk, 0) < 0
	if out.MimeType == "" {
		switch {
		case text:
			out.MimeType = "text/plain; charset=utf-8"
		case in.Offset == 0:
			out.MimeType = http.DetectContentType(chunk)
		default:
			out.MimeType = "application/octet-stream"
		}
	}
	if text {
		out.Encoding, out.Content = "text", string(chunk)
	} else {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(chunk)
	}
	if !out.EOF {
		out.Note = fmt.Sprintf("partial read: bytes %d-%d of %d. Call read_file again with offset=%d for more",
			in.Offset, out.NextOffset, out.Size, out.NextOffset)
	}
	return textResult(readText(out)), out, nil
}

// readText renders a read for the model: the text itself when it is the
// whole file, with a header saying which part it is otherwise.
func readText(out readOut) string {
	if out.Encoding == "text" && out.Offset == 0 && out.EOF {
		if out.Content == "" {
			return fmt.Sprintf("(%s is empty)", out.Path)
		}
		return out.Content
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s: bytes %d-%d of %d, %s, %s ---\n", out.Path, out.Offset, out.Offset+int64(out.Length), out.Size, out.MimeType, out.Encoding)
	b.WriteString(out.Content)
	if out.Note != "" {
		fmt.Fprintf(&b, "\n--- %s ---", out.Note)
	}
	return b.String()
}

func isImage(mimeType string) bool {
	switch mimeType {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

// readImage returns a whole image file as image content.
func readImage(r io.Reader, out readOut) (*sdk.CallToolResult, readOut, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxImage+1))
	if err != nil {
		return nil, readOut{}, fmt.Errorf("reading %s: %w", out.Path, err)
	}
	if len(data) > maxImage {
		return nil, readOut{}, fmt.Errorf("%s grew past %d bytes while being read: read it in parts with offset and limit", out.Path, maxImage)
	}
	out.Size, out.Length, out.EOF, out.Encoding = int64(len(data)), len(data), true, "image"
	out.Note = "the image is returned as an image content block; read it with offset/limit to get base64 bytes instead"
	res := &sdk.CallToolResult{Content: []sdk.Content{
		&sdk.ImageContent{Data: data, MIMEType: out.MimeType},
		&sdk.TextContent{Text: fmt.Sprintf("%s: %s, %d bytes", out.Path, out.MimeType, len(data))},
	}}
	return res, out, nil
}

type listIn struct {
	DataRef
	Path  string `json:"path,omitempty" jsonschema:"directory to list; default /work"`
	Depth int    `json:"depth,omitempty" jsonschema:"levels to descend; default 1"`
}

type listOut struct {
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
	Note      string     `json:"note,omitempty"`
}

func (s *Server) listFiles(ctx context.Context, req *sdk.CallToolRequest, in listIn) (*sdk.CallToolResult, listOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, listOut{}, err
	}
	if in.Depth < 0 {
		return nil, listOut{}, errors.New("depth must be positive")
	}
	res, err := s.apiOf(ctx).ListFiles(ctx, in.SandboxID, token, in.Path, in.Depth)
	if err != nil {
		return nil, listOut{}, s.explain(ctx, err, in.SandboxID)
	}
	out := listOut{Entries: res.Entries, Truncated: res.Truncated}
	if out.Entries == nil {
		out.Entries = []FileInfo{}
	}
	if len(out.Entries) > maxEntries {
		out.Entries, out.Truncated = out.Entries[:maxEntries], true
	}
	if out.Truncated {
		out.Note = fmt.Sprintf("listing cut at %d entries: list a subdirectory, or use a smaller depth", len(out.Entries))
	}
	return nil, out, nil
}

type waitIn struct {
	DataRef
	Path        string  `json:"path" jsonschema:"the file to watch; it need not exist yet"`
	Text        string  `json:"text" jsonschema:"the text to wait for"`
	TimeoutSecs float64 `json:"timeout_secs,omitempty" jsonschema:"give up after this many seconds; default 30"`
}

type waitOut struct {
	Found     bool   `json:"found" jsonschema:"the text appeared; false means the wait timed out"`
	ElapsedMs int64  `json:"elapsed_ms"`
	Note      string `json:"note,omitempty"`
}

func (s *Server) waitForText(ctx context.Context, req *sdk.CallToolRequest, in waitIn) (*sdk.CallToolResult, waitOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, waitOut{}, err
	}
	if in.Path == "" || in.Text == "" {
		return nil, waitOut{}, errors.New("give both path (the file to watch) and text (what to wait for)")
	}
	t := in.TimeoutSecs
	if t == 0 {
		t = 30
	}
	res, err := s.apiOf(ctx).Wait(ctx, in.SandboxID, token, apitype.WaitRequest{Path: in.Path, Text: in.Text, TimeoutSecs: t})
	if err != nil {
		return nil, waitOut{}, s.explain(ctx, err, in.SandboxID)
	}
	out := waitOut{Found: res.Found, ElapsedMs: res.ElapsedMs}
	if !res.Found {
		out.Note = fmt.Sprintf("%q did not appear in %s within %g s. Read the file with read_file to see what is happening, then wait again with a larger timeout_secs if it is still working", in.Text, in.Path, t)
	}
	return nil, out, nil
}

// wholeRunes drops an incomplete UTF-8 sequence from the end of b, so that
// a text file read in parts is never split inside a character.
func wholeRunes(b []byte) []byte {
	whole, _ := outtext.SplitRunes(b)
	return whole
}
