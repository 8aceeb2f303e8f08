package template

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	df := `# a comment
ARG BASE=default
FROM cove:${BASE}
ARG VERSION=1
ENV APP=/srv/app GREETING="hello world"
WORKDIR $APP
RUN echo $VERSION > v.txt
COPY src/ ./src/
COPY ["a.txt", "b.txt", "/opt/"]
USER nobody
RUN ["ls", "-l"]
`
	p, err := Parse([]byte(df), map[string]string{"VERSION": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if p.From != "cove:default" || p.FromLine != 3 {
		t.Errorf("from %q line %d", p.From, p.FromLine)
	}
	if p.Cwd != "/srv/app" || p.User != "nobody" || p.Env["APP"] != "/srv/app" || p.Env["GREETING"] != "hello world" {
		t.Errorf("defaults: cwd %q user %q env %v", p.Cwd, p.User, p.Env)
	}
	var ops []string
	for _, s := range p.Steps {
		ops = append(ops, string(s.Op))
	}
	if got := strings.Join(ops, " "); got != "ARG ENV WORKDIR RUN COPY COPY USER RUN" {
		t.Fatalf("ops %s", got)
	}
	run := p.Steps[3]
	if run.Line != 7 || run.Shell != "echo $VERSION > v.txt" || run.Cwd != "/srv/app" || !contains(run.Env, "VERSION=2") {
		t.Errorf("run %+v", run)
	}
	if c := p.Steps[4]; c.Dest != "/srv/app/src/" || c.Sources[0] != "src" {
		t.Errorf("copy %+v", c)
	}
	if c := p.Steps[5]; c.Dest != "/opt/" || len(c.Sources) != 2 {
		t.Errorf("copy %+v", c)
	}
	if r := p.Steps[7]; r.User != "nobody" || len(r.Args) != 2 {
		t.Errorf("exec-form run %+v", r)
	}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, df string
		args     map[string]string
		want     string
	}{
		{"unknown instruction", "FROM cove:default\nRUN true\nFROBNICATE x\n", nil, "line 3"},
		{"copy outside", "FROM cove:default\nCOPY ../secret /x\n", nil, "line 2: COPY source ../secret is outside the build context"},
		{"copy outside deep", "FROM cove:default\nCOPY a/../../b /x\n", nil, "outside the build context"},
		{"no from", "RUN true\n", nil, "line 1"},
		{"two stages", "FROM cove:a\nFROM cove:b\n", nil, "line 2: multi-stage"},
		{"cmd", "FROM cove:default\nCMD [\"x\"]\n", nil, "line 2: CMD is not supported"},
		{"undeclared arg", "FROM cove:default\nRUN true\n", map[string]string{"X": "1"}, `build arg "X"`},
		{"copy from", "FROM cove:default\nCOPY --from=b /a /b\n", nil, "line 2"},
		{"add url", "FROM cove:default\nADD https://example.org/x /x\n", nil, "line 2: ADD https://example.org/x"},
		{"user group", "FROM cove:default\nUSER a:b\n", nil, "line 2"},
		{"run mount", "FROM cove:default\nRUN --mount=type=cache,target=/x true\n", nil, "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.df), tc.args)
			t.Log(err)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestContextPath(t *testing.T) {
	for in, want := range map[string]string{"a/b": "a/b", "./a": "a", "/abs/x": "abs/x", ".": "", "a/../b": "b"} {
		if got, err := contextPath(in); err != nil || got != want {
			t.Errorf("contextPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "a/../../x"} {
		if _, err := contextPath(in); err == nil {
			t.Errorf("contextPath(%q): want an error", in)
		}
	}
}

func TestParseAdd(t *testing.T) {
	p, err := Parse([]byte("FROM cove:default\nADD pkg.tgz /opt/\nADD --unpack=false pkg.tgz /keep/\nCOPY pkg.tgz /copy/\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Steps) != 3 || !p.Steps[0].Unpack || p.Steps[1].Unpack || p.Steps[2].Unpack {
		t.Fatalf("steps %+v: want ADD to unpack, unless --unpack=false, and COPY not", p.Steps)
	}
}
