// Package template builds cove templates from a Dockerfile: each
// instruction runs in a cove sandbox, each step that changes the files is
// kept as a hidden snapshot keyed by its content hash, and the result is a
// snapshot named for the template.
package template

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/cove-sandbox/cove/internal/sandbox"
)

// ErrInvalid is a Dockerfile, context or option the build cannot use:
// the service's, so the API answers 400.
var ErrInvalid = sandbox.ErrInvalid

// Op is what a step does.
type Op string

// The steps a plan holds. ENV, USER and ARG change only the state later
// steps run with; RUN, COPY/ADD and WORKDIR change files and are kept.
const (
	OpRun     Op = "RUN"
	OpCopy    Op = "COPY"
	OpWorkdir Op = "WORKDIR"
	OpEnv     Op = "ENV"
	OpUser    Op = "USER"
	OpArg     Op = "ARG"
)

// Step is one instruction, its words expanded.
type Step struct {
	Line int    // of the Dockerfile, 1-based
	Text string // as written
	Op   Op
	// RUN: the command (Shell for the shell form, Args for the exec
	// form) and the environment, cwd and user it runs with.
	Shell string
	Args  []string
	Env   []string
	Cwd   string
	User  string
	// COPY/ADD: sources relative to the context, the destination (made
	// absolute against Cwd) and the owner ("" root).
	Sources []string
	Dest    string
	Chown   string
	// Unpack (ADD) extracts a source that is a tar archive (plain, gzip
	// or bzip2) into the destination rather than copying it.
	Unpack bool
}

// Plan is a parsed Dockerfile.
type Plan struct {
	From     string // the FROM reference, expanded
	FromLine int
	Steps    []Step
	// Env, Cwd and User are what the template's sandboxes start with.
	Env  map[string]string
	Cwd  string
	User string
}

// maxDockerfile bounds the Dockerfile: a recipe, not a payload.
const maxDockerfile = 1 << 20

// lineErr names the Dockerfile line of an error.
func lineErr(line int, format string, args ...any) error {
	return fmt.Errorf("%w: Dockerfile line %d: %s", ErrInvalid, line, fmt.Sprintf(format, args...))
}

// Parse reads a Dockerfile with buildkit's parser and resolves it into
// steps: one stage, the instructions cove can run, ARG values from
// buildArgs (which must all be declared).
func Parse(dockerfile []byte, buildArgs map[string]string) (*Plan, error) {
	if len(dockerfile) > maxDockerfile {
		return nil, fmt.Errorf("%w: the Dockerfile is over %d bytes", ErrInvalid, maxDockerfile)
	}
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, describe(err))
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, describe(err))
	}
	switch {
	case len(stages) == 0:
		return nil, fmt.Errorf("%w: the Dockerfile has no FROM", ErrInvalid)
	case len(stages) > 1:
		return nil, lineErr(startLine(stages[1].Location), "multi-stage builds are not supported: use one FROM")
	}
	r := &resolver{lex: shell.NewLex(res.EscapeToken), args: map[string]string{}, env: map[string]string{},
		buildArgs: buildArgs, used: map[string]bool{}}
	for _, a := range metaArgs {
		r.declareArgs(a.Args)
	}
	st := stages[0]
	from, err := r.expand(st.BaseName)
	if err != nil {
		return nil, lineErr(startLine(st.Location), "FROM: %v", err)
	}
	p := &Plan{From: from, FromLine: startLine(st.Location)}
	// Meta args are visible to FROM only, unless declared again.
	r.args = map[string]string{}
	for _, c := range st.Commands {
		s, err := r.step(c)
		if err != nil {
			return nil, err
		}
		if s != nil {
			p.Steps = append(p.Steps, *s)
		}
	}
	for k := range buildArgs {
		if !r.used[k] {
			return nil, fmt.Errorf("%w: build arg %q is not declared by an ARG in the Dockerfile", ErrInvalid, k)
		}
	}
	p.Env, p.Cwd, p.User = maps.Clone(r.env), r.cwd, r.user
	return p, nil
}

// describe is a parse error with its line, if it has one.
func describe(err error) error {
	var le *parser.LocationError
	if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
		msg := err.Error()
		if i := strings.Index(msg, ": "); strings.HasPrefix(msg, "dockerfile parse error on line") && i > 0 {
			msg = msg[i+2:]
		}
		return fmt.Errorf("Dockerfile line %d: %s", le.Locations[0][0].Start.Line, msg)
	}
	var ue *instructions.UnknownInstructionError
	if errors.As(err, &ue) {
		return fmt.Errorf("Dockerfile line %d: unknown instruction %s", ue.Line, ue.Instruction)
	}
	return err
}

func startLine(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

// resolver walks a stage's instructions, keeping the state they build.
type resolver struct {
	lex       *shell.Lex
	args, env map[string]string // ARG values in scope; ENV so far
	buildArgs map[string]string
	used      map[string]bool
	cwd, user string
}

func (r *resolver) declareArgs(args []instructions.KeyValuePairOptional) {
	for _, a := range args {
		v, given := r.buildArgs[a.Key]
		switch {
		case given:
			r.used[a.Key] = true
		case a.Value != nil:
			v = *a.Value
		}
		r.args[a.Key] = v
	}
}

// vars are the variables words expand with: ARGs, then ENV over them.
func (r *resolver) vars() []string {
	all := maps.Clone(r.args)
	maps.Copy(all, r.env)
	out := make([]string, 0, len(all))
	for _, k := range slices.Sorted(maps.Keys(all)) {
		out = append(out, k+"="+all[k])
	}
	return out
}

func (r *resolver) expand(word string) (string, error) {
	v, _, err := r.lex.ProcessWord(word, shell.EnvsFromSlice(r.vars()))
	return v, err
}

// step resolves one instruction; nil for one that needs no step.
func (r *resolver) step(c instructions.Command) (*Step, error) {
	line := startLine(c.Location())
	text := strings.TrimSpace(fmt.Sprint(c))
	if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if _, isRun := c.(*instructions.RunCommand); !isRun {
			if err := e.Expand(r.expand); err != nil {
				return nil, lineErr(line, "%v", err)
			}
		}
	}
	s := &Step{Line: line, Text: text}
	switch c := c.(type) {
	case *instructions.RunCommand:
		return r.run(s, c)
	case *instructions.CopyCommand:
		if c.From != "" {
			return nil, lineErr(line, "COPY --from is not supported: there is one stage")
		}
		return r.copy(s, c.SourcesAndDest, c.Chown, c.Chmod)
	case *instructions.AddCommand:
		for _, src := range c.SourcePaths {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return nil, lineErr(line, "ADD %s: only files of the build context can be added", src)
			}
		}
		if c.Unpack != nil && !*c.Unpack {
			return r.copy(s, c.SourcesAndDest, c.Chown, c.Chmod)
		}
		s.Unpack = true
		return r.copy(s, c.SourcesAndDest, c.Chown, c.Chmod)
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			if kv.Key == "" || strings.ContainsAny(kv.Key, "=\x00") {
				return nil, lineErr(line, "ENV %q: not a variable name", kv.Key)
			}
			r.env[kv.Key] = kv.Value
		}
		s.Op = OpEnv
	case *instructions.WorkdirCommand:
		r.cwd = r.abs(c.Path)
		s.Op, s.Cwd = OpWorkdir, r.cwd
	case *instructions.UserCommand:
		if strings.Contains(c.User, ":") {
			return nil, lineErr(line, "USER %s: a group is not supported: name the user only", c.User)
		}
		r.user = c.User
		s.Op, s.User = OpUser, c.User
	case *instructions.ArgCommand:
		r.declareArgs(c.Args)
		s.Op = OpArg
	case *instructions.CmdCommand, *instructions.EntrypointCommand, *instructions.ExposeCommand,
		*instructions.LabelCommand, *instructions.MaintainerCommand, *instructions.StopSignalCommand,
		*instructions.HealthCheckCommand, *instructions.VolumeCommand:
		return nil, lineErr(line, "%s is not supported by cove templates: use the start command (--start) for what runs in them", strings.ToUpper(c.Name()))
	default:
		return nil, lineErr(line, "%s is not supported by cove templates", strings.ToUpper(c.Name()))
	}
	return s, nil
}

func (r *resolver) run(s *Step, c *instructions.RunCommand) (*Step, error) {
	if len(c.FlagsUsed) > 0 {
		return nil, lineErr(s.Line, "RUN --%s is not supported", c.FlagsUsed[0])
	}
	if len(c.Files) > 0 {
		return nil, lineErr(s.Line, "RUN with a heredoc is not supported")
	}
	s.Op, s.Env, s.Cwd, s.User = OpRun, r.vars(), r.cwd, r.user
	if c.PrependShell {
		s.Shell = strings.Join(c.CmdLine, " ")
	} else {
		s.Args = slices.Clone(c.CmdLine)
	}
	if s.Shell == "" && len(s.Args) == 0 {
		return nil, lineErr(s.Line, "RUN needs a command")
	}
	return s, nil
}

func (r *resolver) copy(s *Step, sd instructions.SourcesAndDest, chown, chmod string) (*Step, error) {
	if len(sd.SourceContents) > 0 {
		return nil, lineErr(s.Line, "%s with a heredoc is not supported", strings.Fields(s.Text)[0])
	}
	if chmod != "" {
		return nil, lineErr(s.Line, "--chmod is not supported")
	}
	user, _, _ := strings.Cut(chown, ":")
	s.Op, s.Chown = OpCopy, user
	for _, src := range sd.SourcePaths {
		clean, err := contextPath(src)
		if err != nil {
			return nil, lineErr(s.Line, "%v", err)
		}
		s.Sources = append(s.Sources, clean)
	}
	s.Dest = sd.DestPath
	if !strings.HasPrefix(s.Dest, "/") {
		s.Dest = r.abs(s.Dest)
		if strings.HasSuffix(sd.DestPath, "/") || sd.DestPath == "." {
			s.Dest += "/"
		}
	}
	return s, nil
}

// abs is p made absolute against the working directory.
func (r *resolver) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	base := r.cwd
	if base == "" {
		base = "/"
	}
	return path.Join(base, p)
}

// contextPath cleans a COPY source; one outside the context is refused.
func contextPath(src string) (string, error) {
	clean := path.Clean("/" + src)
	// Clean of "/"+src drops a leading "..": compare with the plain clean.
	if rel := path.Clean(src); rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("COPY source %s is outside the build context", src)
	}
	return strings.TrimPrefix(clean, "/"), nil
}
