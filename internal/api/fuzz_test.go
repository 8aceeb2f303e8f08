package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fuzzBodies are the request bodies the handlers decode, by the first
// byte of a fuzz input.
var fuzzBodies = []func() any{
	func() any { return new(apitype.CreateSandboxRequest) },
	func() any { return new(apitype.ExecRequest) },
	func() any { return new(apitype.EvalRequest) },
	func() any { return new(apitype.ExtendRequest) },
	func() any { return new(apitype.WaitRequest) },
	func() any { return new(apitype.MkdirRequest) },
	func() any { return new(apitype.MoveRequest) },
	func() any { return new(apitype.NetworkPolicy) },
	func() any { return new(apitype.ExposePortRequest) },
	func() any { return new(apitype.ResumeRequest) },
	func() any { return new(apitype.CheckpointRequest) },
	func() any { return new(apitype.RollbackRequest) },
	func() any { return new(apitype.SignalRequest) },
	func() any { return new(apitype.CreateSnapshotRequest) },
	func() any { return new(apitype.BranchRequest) },
}

// decodeBody runs the handlers' decode on body.
func decodeBody(body []byte, v any, emptyOK bool) error {
	r := httptest.NewRequest("POST", "/v1/x", bytes.NewReader(body))
	return decode(httptest.NewRecorder(), r, v, emptyOK)
}

// FuzzDecodeRequest decodes arbitrary bodies as the handlers do: a body
// is refused with an invalid or too-large error, or accepted; an accepted
// one re-encodes to JSON that decodes to the same request and encodes the
// same again, and the checks the exec and mkdir handlers make next give
// the same verdict after that round trip.
func FuzzDecodeRequest(f *testing.F) {
	for i, s := range []string{
		`{"n":2,"ttl_secs":60,"labels":{"a":"b"},"env":{"K":"v"},"network":{"allow":["example.com"]}}`,
		`{"args":["ls","-l"],"env":{"A":"1"},"stdin":"hi","timeout_secs":1.5}`,
		`{"code":"1+1","timeout_secs":2}`,
		`{"ttl_secs":-5}`,
		`{"timeout_secs":1e309}`,
		`{"path":"/tmp/x","mode":"0700"}`,
		`{"from":"a","to":"../b","overwrite":true}`,
		`{"allow":["*.example.com:443"],"presets":["pypi"]}`,
		`{"port":8080,"public":true}`,
		`{}`, `{"unknown":1}`, `{"a":1}{"b":2}`, `[]`, `null`, ``, `{"n":1e400}`, `{"env":{"\u0000":"x"}}`,
	} {
		f.Add(byte(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		mk := fuzzBodies[int(kind)%len(fuzzBodies)]
		v := mk()
		err := decodeBody(body, v, kind&0x80 != 0)
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalid) && !errors.Is(err, sandbox.ErrTooLarge) {
				t.Fatalf("decode error %v is neither invalid nor too large", err)
			}
			return
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encode %T: %v", v, err)
		}
		again := mk()
		if err := decodeBody(enc, again, false); err != nil {
			t.Fatalf("decode of the re-encoding %s: %v", enc, err)
		}
		enc2, _ := json.Marshal(again)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encode(decode(encode(x))) differs:\n%s\n%s", enc, enc2)
		}
		third := mk()
		if err := decodeBody(enc2, third, false); err != nil || !reflect.DeepEqual(again, third) {
			t.Fatalf("decode(encode(x)) != x for %s: %+v, %v", enc2, third, err)
		}
		if e1, e2 := nextChecks(v), nextChecks(again); (e1 == nil) != (e2 == nil) {
			t.Fatalf("checks differ after a round trip: %v / %v", e1, e2)
		}
	})
}

// nextChecks is what a handler checks of a decoded request before it
// calls the service: for exec, what reaches the agent; for mkdir, the
// mode; for create, the lifetime's conversion.
func nextChecks(v any) error {
	switch req := v.(type) {
	case *apitype.ExecRequest:
		timeout, err := secs("timeout_secs", req.TimeoutSecs, maxExecTimeout)
		if err != nil {
			return err
		}
		if timeout < 0 || timeout > maxExecTimeout {
			panic(fmt.Sprintf("secs accepted %v as %v", req.TimeoutSecs, timeout))
		}
		env, err := sandbox.EnvList(req.Env)
		if err != nil {
			return err
		}
		for _, kv := range env {
			if k, val, ok := strings.Cut(kv, "="); !ok || req.Env[k] != val {
				panic(fmt.Sprintf("env entry %q is not one of %q", kv, req.Env))
			}
		}
		args := req.Args
		if len(req.Cmd) > 0 {
			args = req.Cmd
		}
		ar := agentproto.ExecRequest{Args: args, Shell: req.Shell, Cwd: req.Cwd, Env: env, TimeoutMs: timeout.Milliseconds(), Stdin: []byte(req.Stdin)}
		return ar.Validate()
	case *apitype.MkdirRequest:
		mode, err := apitype.ParseMode(req.Mode)
		if err != nil {
			return err
		}
		if back, err := apitype.ParseMode(fmt.Sprintf("%04o", mode)); err != nil || back != mode {
			panic(fmt.Sprintf("mode %q parsed as %o, which reads back as %o, %v", req.Mode, mode, back, err))
		}
		_, err = agentproto.ResolvePath(req.Path)
		return err
	case *apitype.CreateSandboxRequest:
		if d := ttl(req.TTLSecs); (d < 0) != (req.TTLSecs < 0) || (d == 0) != (req.TTLSecs == 0) {
			panic(fmt.Sprintf("ttl(%d) = %v: sign lost", req.TTLSecs, d))
		}
		return sandbox.ValidateLabels(req.Labels)
	}
	return nil
}

// TestDecodeBodyLimit: a body over maxJSONBody is refused as too large,
// whatever it holds.
func TestDecodeBodyLimit(t *testing.T) {
	body := append([]byte(`{"shell":"`), bytes.Repeat([]byte("x"), maxJSONBody)...)
	body = append(body, `"}`...)
	var req apitype.ExecRequest
	if err := decodeBody(body, &req, false); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if req.Shell != "" {
		t.Fatalf("a refused body filled the request")
	}
}
