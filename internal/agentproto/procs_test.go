package agentproto

import (
	"context"
	"io"
	"testing"
)

func (stubHandler) ProcStart(context.Context, ProcStartRequest) (ProcInfo, error) {
	return ProcInfo{}, Errorf(CodeInvalid, "stub")
}
func (stubHandler) ProcList(context.Context, ProcListRequest) (ProcListResult, error) {
	return ProcListResult{}, nil
}
func (stubHandler) ProcGet(_ context.Context, ref ProcRef) (ProcInfo, error) {
	return ProcInfo{}, Errorf(CodeNoProcess, "no background process with %s", ref)
}
func (stubHandler) ProcSignal(context.Context, ProcSignalRequest) (ProcInfo, error) {
	return ProcInfo{}, Errorf(CodeState, "stub")
}
func (stubHandler) ProcRemove(context.Context, ProcRef) error { return Errorf(CodeState, "stub") }
func (stubHandler) ProcOutput(context.Context, ProcOutputRequest) (ProcMark, func(io.Writer) error, error) {
	return ProcMark{}, nil, Errorf(CodeNoProcess, "stub")
}
func (stubHandler) ProcStdin(context.Context, ProcStdinRequest) (func(io.Reader) (ProcStdinResult, error), error) {
	return nil, Errorf(CodeNoProcess, "stub")
}

func TestCheckTag(t *testing.T) {
	for _, tc := range []struct {
		tag string
		ok  bool
	}{
		{"", true},
		{"web", true},
		{"dev-server.1", true},
		{"123", false},
		{"a b", false},
		{"a/b", false},
		{string(make([]byte, MaxTag+1)), false},
	} {
		if err := CheckTag(tc.tag); (err == nil) != tc.ok {
			t.Errorf("CheckTag(%.20q) = %v, want ok %v", tc.tag, err, tc.ok)
		}
	}
}

func TestProcStartValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  ProcStartRequest
		ok   bool
	}{
		{"plain", ProcStartRequest{ExecRequest: ExecRequest{Shell: "sleep 1"}}, true},
		{"stdin", ProcStartRequest{ExecRequest: ExecRequest{Shell: "cat", Stdin: []byte("x")}}, false},
		{"small ring", ProcStartRequest{ExecRequest: ExecRequest{Shell: "x"}, OutputLimit: 10}, false},
		{"huge ring", ProcStartRequest{ExecRequest: ExecRequest{Shell: "x"}, OutputLimit: MaxOutputLimit + 1}, false},
		{"numeric tag", ProcStartRequest{ExecRequest: ExecRequest{Shell: "x"}, Tag: "7"}, false},
		{"no command", ProcStartRequest{}, false},
	} {
		if err := tc.req.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
