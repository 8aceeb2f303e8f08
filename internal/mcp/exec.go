package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const (
	// maxStream caps each of stdout and stderr returned by one call: a
	// model's context is precious, and a bigger answer helps nobody.
	maxStream = 64 << 10
	// defaultExecTimeout bounds a command that asks for no timeout, so
	// that a forgotten `sleep infinity` does not hang the tool call.
	defaultExecTimeout = 60
)

// DataRef names the sandbox a data-plane tool acts on and its token.
type DataRef struct {
	SandboxID    string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	SandboxToken string `json:"sandbox_token,omitempty" jsonschema:"the sandbox's token; omit it for sandboxes this session created, spawned or branched"`
}

// token returns the token for ref's sandbox.
func (s *Server) token(req *sdk.CallToolRequest, ref DataRef) (string, error) {
	if ref.SandboxID == "" {
		return "", errors.New("sandbox_id is empty: give the id of a sandbox (list_sandboxes shows them), or use sandbox_run, which needs none")
	}
	return s.session(req).token(ref.SandboxID, ref.SandboxToken)
}

// CommandOpts is what every command-running tool takes.
type CommandOpts struct {
	Cwd         string            `json:"cwd,omitempty" jsonschema:"working directory; default /work"`
	Env         map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	Stdin       string            `json:"stdin,omitempty" jsonschema:"text fed to the command's standard input"`
	TimeoutSecs float64           `json:"timeout_secs,omitempty" jsonschema:"kill the command after this many seconds; default 60"`
	User        string            `json:"user,omitempty" jsonschema:"run as this account: root, or user (uid 1000, passwordless sudo); default: the sandbox's default user, root unless create_sandbox set one"`
}

type execIn struct {
	DataRef
	Command string   `json:"command,omitempty" jsonschema:"a shell command line, run by /bin/sh -c; give this or args"`
	Args    []string `json:"args,omitempty" jsonschema:"an argv list run without a shell, e.g. [\"python3\", \"-V\"]; give this or command"`
	CommandOpts
	Background bool   `json:"background,omitempty" jsonschema:"start the command as a background process and return at once with its pid, for servers and long jobs; read its output with read_process_output"`
	Tag        string `json:"tag,omitempty" jsonschema:"background only: a name for the process, usable instead of its pid"`
}

// ExecOut is the result of a command.
type ExecOut struct {
	SandboxID  string `json:"sandbox_id"`
	ExitCode   int    `json:"exit_code" jsonschema:"the command's exit code; -1 if it was killed"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	TimedOut   bool   `json:"timed_out,omitempty" jsonschema:"the command ran past timeout_secs and was killed"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"output was cut; see note"`
	DurationMs int64  `json:"duration_ms"`
	PID        int    `json:"pid,omitempty" jsonschema:"background only: the process's id, also its process group"`
	Tag        string `json:"tag,omitempty" jsonschema:"background only: the process's tag"`
	Note       string `json:"note,omitempty" jsonschema:"what to do about cut output, a timeout, or a replaced sandbox"`
}

func (s *Server) execCommand(ctx context.Context, req *sdk.CallToolRequest, in execIn) (*sdk.CallToolResult, ExecOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, ExecOut{}, err
	}
	var shell string
	switch {
	case in.Command != "" && len(in.Args) > 0:
		return nil, ExecOut{}, errors.New("give command (a shell string) or args (an argv list), not both")
	case in.Command != "":
		shell = in.Command
	case len(in.Args) > 0:
	default:
		return nil, ExecOut{}, errors.New("nothing to run: give command (a shell string such as \"ls -la\") or args (an argv list)")
	}
	if in.Background {
		out, err := s.startBackground(ctx, in, token)
		return execResult(out, err)
	}
	ereq := execRequest(in.CommandOpts)
	if shell != "" {
		ereq.Shell = shell
	} else {
		ereq.Args = in.Args
	}
	out, err := s.exec(ctx, in.SandboxID, token, ereq)
	return execResult(out, err)
}

func execRequest(c CommandOpts) apitype.ExecRequest {
	t := c.TimeoutSecs
	if t == 0 {
		t = defaultExecTimeout
	}
	return apitype.ExecRequest{Cwd: c.Cwd, Env: c.Env, Stdin: c.Stdin, TimeoutSecs: t, User: c.User}
}

// exec runs req and caps what it returns.
func (s *Server) exec(ctx context.Context, id, token string, req apitype.ExecRequest) (ExecOut, error) {
	res, err := s.apiOf(ctx).Exec(ctx, id, token, req)
	if err != nil {
		return ExecOut{}, s.explain(ctx, err, id)
	}
	return execOut(id, req, res), nil
}

// execOut caps a command's output and says what to do about it.
func execOut(id string, req apitype.ExecRequest, res apitype.ExecResponse) ExecOut {
	out := ExecOut{SandboxID: id, ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationMs: res.DurationMs}
	var cutOut, cutErr bool
	out.Stdout, cutOut = clip(res.Stdout, maxStream)
	out.Stderr, cutErr = clip(res.Stderr, maxStream)
	var notes []string
	if cutOut || cutErr || res.Truncated {
		out.Truncated = true
		notes = append(notes, fmt.Sprintf("output was truncated (over %d KiB per stream; the middle is cut). To see all of it, "+
			"run the command again with its output redirected to a file (e.g. `cmd > /tmp/out.txt 2>&1`) and page through it with read_file offset/limit", maxStream>>10))
	}
	if res.TimedOut {
		notes = append(notes, fmt.Sprintf("the command was killed after timeout_secs=%g: give a larger timeout_secs, "+
			"or start it with background=true and follow its log with wait_for_text or read_file", req.TimeoutSecs))
	}
	out.Note = strings.Join(notes, "; ")
	return out
}

// execResult renders a command's result as text for the model, beside
// the structured result.
func execResult(out ExecOut, err error) (*sdk.CallToolResult, ExecOut, error) {
	if err != nil {
		return nil, ExecOut{}, err
	}
	var b strings.Builder
	if out.PID != 0 {
		fmt.Fprintf(&b, "sandbox %s: background process pid %d\n", out.SandboxID, out.PID)
	} else {
		fmt.Fprintf(&b, "sandbox %s: exit_code %d (%d ms)", out.SandboxID, out.ExitCode, out.DurationMs)
		if out.TimedOut {
			b.WriteString(", timed out")
		}
		b.WriteString("\n")
		if out.Stdout != "" {
			fmt.Fprintf(&b, "--- stdout ---\n%s\n", strings.TrimSuffix(out.Stdout, "\n"))
		}
		if out.Stderr != "" {
			fmt.Fprintf(&b, "--- stderr ---\n%s\n", strings.TrimSuffix(out.Stderr, "\n"))
		}
	}
	if out.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", out.Note)
	}
	return textResult(b.String()), out, nil
}

func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

type evalIn struct {
	DataRef
	Code        string  `json:"code" jsonschema:"Python source: statements, and optionally a final expression whose value is returned"`
	TimeoutSecs float64 `json:"timeout_secs,omitempty" jsonschema:"stop after this many seconds; default 60"`
}

type evalOut struct {
	SandboxID string `json:"sandbox_id"`
	Result    string `json:"result" jsonschema:"repr of the final expression's value, if any"`
	Error     string `json:"error" jsonschema:"the exception and traceback, if the code raised"`
	ExitCode  int    `json:"exit_code" jsonschema:"0 on success, 1 if the code raised"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Note      string `json:"note,omitempty"`
}

func (s *Server) evalCode(ctx context.Context, req *sdk.CallToolRequest, in evalIn) (*sdk.CallToolResult, evalOut, error) {
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, evalOut{}, err
	}
	t := in.TimeoutSecs
	if t == 0 {
		t = defaultExecTimeout
	}
	res, err := s.apiOf(ctx).Eval(ctx, in.SandboxID, token, apitype.EvalRequest{Code: in.Code, TimeoutSecs: t})
	if err != nil {
		return nil, evalOut{}, s.explain(ctx, err, in.SandboxID)
	}
	out := evalOut{SandboxID: in.SandboxID, ExitCode: res.ExitCode}
	var cut [4]bool
	out.Result, cut[0] = clip(res.Result, maxStream)
	out.Error, cut[1] = clip(res.Error, maxStream)
	out.Stdout, cut[2] = clip(res.Stdout, maxStream)
	out.Stderr, cut[3] = clip(res.Stderr, maxStream)
	if cut[0] || cut[1] || cut[2] || cut[3] {
		out.Note = fmt.Sprintf("output was truncated (over %d KiB; the middle is cut): write big values to a file and page through it with read_file", maxStream>>10)
	}
	var b strings.Builder
	for _, f := range []struct{ name, v string }{{"result", out.Result}, {"stdout", out.Stdout}, {"stderr", out.Stderr}, {"error", out.Error}, {"note", out.Note}} {
		if f.v != "" {
			fmt.Fprintf(&b, "--- %s ---\n%s\n", f.name, strings.TrimSuffix(f.v, "\n"))
		}
	}
	if b.Len() == 0 {
		b.WriteString("(no result and no output)\n")
	}
	return textResult(b.String()), out, nil
}

type runIn struct {
	Command string `json:"command" jsonschema:"a shell command line, run by /bin/sh -c"`
	CommandOpts
	SnapshotTag string `json:"snapshot_tag,omitempty" jsonschema:"snapshot to create this session's sandbox from, on first use only; empty: the default image"`
}

func (s *Server) sandboxRun(ctx context.Context, req *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, ExecOut, error) {
	if in.Command == "" {
		return nil, ExecOut{}, errors.New("command is empty: give a shell command line such as \"python3 -V\"")
	}
	st := s.session(req)
	ereq := execRequest(in.CommandOpts)
	ereq.Shell = in.Command
	var note string
	for attempt := 0; ; attempt++ {
		id, fresh, err := s.runSandbox(ctx, st, in.SnapshotTag)
		if err != nil {
			return nil, ExecOut{}, err
		}
		if fresh && attempt == 0 {
			note = fmt.Sprintf("created sandbox %s for this session; later sandbox_run calls reuse it, and other tools can use it by id without a sandbox_token", id)
		}
		token, err := st.token(id, "")
		if err != nil {
			return nil, ExecOut{}, err
		}
		res, err := s.apiOf(ctx).Exec(ctx, id, token, ereq)
		if errors.Is(err, client.ErrNotFound) && attempt == 0 && s.sandboxGone(ctx, id) {
			st.forget(id)
			note = fmt.Sprintf("this session's sandbox %s was gone (expired or killed), so the command ran in a new sandbox without its files", id)
			continue
		}
		if err != nil {
			return nil, ExecOut{}, s.explain(ctx, err, id)
		}
		out := execOut(id, ereq, res)
		if note != "" {
			out.Note = strings.TrimPrefix(out.Note+"; "+note, "; ")
		}
		return execResult(out, nil)
	}
}

// runSandbox returns this session's sandbox_run sandbox, creating it if
// needed; fresh reports that it was just made.
func (s *Server) runSandbox(ctx context.Context, st *session, snapshotTag string) (id string, fresh bool, err error) {
	st.runMu.Lock()
	defer st.runMu.Unlock()
	if id := st.runSandbox(); id != "" {
		return id, false, nil
	}
	infos, err := s.apiOf(ctx).CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: snapshotTag})
	if err != nil {
		return "", false, s.explain(ctx, err, "")
	}
	if len(infos) != 1 {
		return "", false, fmt.Errorf("the daemon made %d sandboxes instead of 1; see list_sandboxes", len(infos))
	}
	st.setRunSandbox(infos[0].ID, infos[0].Token)
	return infos[0].ID, true, nil
}

// clip shortens s to about max bytes by cutting out its middle, keeping
// the start (what ran) and more of the end (where errors are), on UTF-8
// boundaries.
func clip(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	head, tail := max/4, len(s)-(max-max/4)
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + fmt.Sprintf("\n[... %d bytes cut ...]\n", tail-head) + s[tail:], true
}
