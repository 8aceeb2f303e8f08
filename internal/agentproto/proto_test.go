package agentproto

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
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

func TestExecRequestValidate(t *testing.T) {
	big := strings.Repeat("a", MaxArg+1)
	tests := []struct {
		name string
		req  ExecRequest
		code string // "": valid
		want string // in the message
	}{
		{"args", ExecRequest{Args: []string{"echo", "hi"}}, "", ""},
		{"shell", ExecRequest{Shell: "echo hi", Env: []string{"A=b", "EMPTY="}, Cwd: "/tmp"}, "", ""},
		{"longest arg", ExecRequest{Args: []string{"echo", big[1:]}}, "", ""},
		{"largest stdin", ExecRequest{Args: []string{"wc"}, Stdin: make([]byte, MaxStdin)}, "", ""},
		{"none", ExecRequest{}, CodeInvalid, "args or a shell"},
		{"both", ExecRequest{Args: []string{"true"}, Shell: "true"}, CodeInvalid, "not both"},
		{"negative timeout", ExecRequest{Args: []string{"true"}, TimeoutMs: -1}, CodeInvalid, "timeout"},
		{"NUL in args", ExecRequest{Args: []string{"echo", "a\x00b"}}, CodeInvalid, "args[1] contains a NUL byte"},
		{"NUL in shell", ExecRequest{Shell: "echo \x00"}, CodeInvalid, "shell contains a NUL byte"},
		{"NUL in cwd", ExecRequest{Shell: "true", Cwd: "/tmp\x00"}, CodeInvalid, "cwd contains a NUL byte"},
		{"NUL in env value", ExecRequest{Shell: "true", Env: []string{"KEY=a\x00"}}, CodeInvalid, `env "KEY" contains a NUL byte`},
		{"NUL in env key", ExecRequest{Shell: "true", Env: []string{"K\x00=a"}}, CodeInvalid, `env "K\x00" contains a NUL byte`},
		{"env without =", ExecRequest{Shell: "true", Env: []string{"NOEQUALS"}}, CodeInvalid, "KEY=VALUE"},
		{"env without key", ExecRequest{Shell: "true", Env: []string{"=v"}}, CodeInvalid, "KEY=VALUE"},
		{"arg too long", ExecRequest{Args: []string{"echo", big}}, CodeInvalid, "args[1] is 131072 bytes"},
		{"shell too long", ExecRequest{Shell: big}, CodeInvalid, "shell is 131072 bytes"},
		{"env too long", ExecRequest{Shell: "true", Env: []string{"K=" + big}}, CodeInvalid, `env "K" is`},
		{"cwd too long", ExecRequest{Shell: "true", Cwd: "/" + strings.Repeat("d", MaxCwd)}, CodeInvalid, "cwd is"},
		{"command line too long", ExecRequest{Args: slices.Repeat([]string{big[1:]}, MaxArgs/MaxArg+1)}, CodeInvalid, "together"},
		{"stdin too large", ExecRequest{Args: []string{"wc"}, Stdin: make([]byte, MaxStdin+1)}, CodeTooLarge, "stdin is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.code == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v (code %q), want code %q and %q", err, CodeOf(err), tt.code, tt.want)
			}
			if len(err.Error()) > 500 {
				t.Errorf("message of %d bytes: it must not echo the input", len(err.Error()))
			}
		})
	}
}

// The largest valid exec request fits in a frame, so the daemon never
// sends what the agent would refuse to read.
func TestLargestExecFits(t *testing.T) {
	t.Parallel()
	esc := strings.Repeat("\x01", MaxArg) // six bytes each in JSON
	req := ExecRequest{Shell: esc, Cwd: "/" + strings.Repeat("\x01", MaxCwd-1), Stdin: make([]byte, MaxStdin)}
	for len(req.Env)*(MaxArg+9) < MaxArgs-2*(MaxArg+9) {
		req.Env = append(req.Env, "K="+esc[2:])
	}
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	// Encoding stdin costs seconds under the race detector, and its
	// length is known: base64 in quotes.
	req.Stdin = nil
	body, err := json.Marshal(Header{Op: OpExec, Body: mustMarshal(t, req)})
	if err != nil {
		t.Fatal(err)
	}
	size := len(body) + len(`,"stdin":""`) + (MaxStdin+2)/3*4
	if size > maxJSONFrame {
		t.Fatalf("a valid exec takes %d bytes in JSON, over the frame limit of %d", size, maxJSONFrame)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
