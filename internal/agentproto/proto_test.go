package agentproto

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"
)

func TestResolvePath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"a.py", "/work/a.py", true},
		{"dir/sub/", "/work/dir/sub", true},
		{"/etc/hosts", "/etc/hosts", true},
		{"/tmp//x/./y", "/tmp/x/y", true},
		{"", "", false},
		{"../etc/passwd", "", false},
		{"/work/../etc", "", false},
		{"a/../../b", "", false},
		{"a\x00b", "", false},
		{"..", "", false},
		{"x..y", "/work/x..y", true},
	}
	for _, tt := range tests {
		got, err := ResolvePath(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && CodeOf(err) != CodeInvalid {
			t.Errorf("ResolvePath(%q) error code %q, want %q", tt.in, CodeOf(err), CodeInvalid)
		}
	}
}

func TestDataFramesRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, ChunkSize - 1, ChunkSize, 3*ChunkSize + 17} {
		data := make([]byte, size)
		rand.Read(data)
		var buf bytes.Buffer
		w := NewDataWriter(&buf)
		if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		// A JSON frame after the content must be left for the next reader.
		WriteJSON(&buf, Response{})
		got, err := io.ReadAll(NewDataReader(&buf))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: read %d bytes, %v", size, len(got), err)
		}
		var resp Response
		if err := ReadJSON(&buf, &resp); err != nil {
			t.Fatalf("size %d: frame after content: %v", size, err)
		}
	}
}

func TestDataReaderCutShort(t *testing.T) {
	var buf bytes.Buffer
	NewDataWriter(&buf).Write([]byte("partial content"))
	// No End frame: the writer went away.
	b := buf.Bytes()
	for _, cut := range []int{len(b), len(b) - 3} {
		_, err := io.ReadAll(NewDataReader(bytes.NewReader(b[:cut])))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: err %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestReadJSONRejectsHugeFrame(t *testing.T) {
	var buf bytes.Buffer
	writeFrameHeader := []byte{frameJSON, 0xff, 0xff, 0xff, 0xff}
	buf.Write(writeFrameHeader)
	var v Header
	if err := ReadJSON(&buf, &v); err == nil {
		t.Fatal("a 4 GiB JSON frame was accepted")
	}
}
