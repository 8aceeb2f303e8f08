package main

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestMain lets the test binary stand in for cove in a shell, for
// TestBashCompletion.
func TestMain(m *testing.M) {
	if os.Getenv("COVE_TEST_AS_COVE") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// verbs returns every command under cmd, cobra's own (help, completion)
// aside.
func verbs(cmd *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range cmd.Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		out = append(out, c)
		out = append(out, verbs(c)...)
	}
	return out
}

func TestHelpEveryVerb(t *testing.T) {
	all := verbs(newRootCmd())
	if len(all) < 20 {
		t.Fatalf("only %d verbs", len(all))
	}
	for _, v := range all {
		path := strings.Fields(v.CommandPath())[1:]
		t.Run(strings.Join(path, " "), func(t *testing.T) {
			if v.Short == "" || v.Example == "" && v.Name() != "version" {
				t.Errorf("no summary or examples: Short %q, Example %q", v.Short, v.Example)
			}
			about := cmp.Or(v.Long, v.Short) // cobra shows Long if there is one
			for _, h := range []string{"--help", "-h"} {
				out, err := runCLI(t, append(path, h)...)
				if err != nil || !strings.Contains(out, about) || !strings.Contains(out, v.Example) {
					t.Errorf("%s: %v\n%s", h, err, out)
				}
			}
			if out, err := runCLI(t, append([]string{"help"}, path...)...); err != nil || !strings.Contains(out, about) {
				t.Errorf("cove help: %v\n%s", err, out)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"create", "--nope"},
		{"create", "extra"},
		{"create", "-n", "0"},
		{"exec", "sb1"},
		{"exec", "sb1", "--nope", "--", "true"},
		{"cp", "a", "b"},
		{"kill"},
		{"kill", "--all", "sb1"},
		{"spawn"},
		{"branch", "a", "b"},
		{"snapshot", "frobnicate"},
		{"image", "rm"},
		{"serve", "extra"},
	} {
		if _, err := runCLI(t, args...); exitCode(err) != 2 {
			t.Errorf("cove %s: %v, exit %d; want a usage error, exit 2", strings.Join(args, " "), err, exitCode(err))
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, tt := range []struct{ shell, marker string }{
		{"bash", "complete -o default -F __start_cove cove"},
		{"zsh", "#compdef cove"},
		{"fish", "complete -c cove"},
	} {
		t.Run(tt.shell, func(t *testing.T) {
			out, err := runCLI(t, "completion", tt.shell)
			if err != nil || !strings.Contains(out, tt.marker) || !strings.Contains(out, "__complete") {
				t.Errorf("completion %s: %v, no %q calling `cove __complete`:\n%.300s", tt.shell, err, tt.marker, out)
			}
		})
	}
	// The scripts ask `cove __complete` for the verbs.
	out, err := runCLI(t, "__complete", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"create", "ls", "exec", "cp", "kill", "snapshot", "spawn", "branch", "info", "image", "mcp", "serve", "version", "bench", "completion"} {
		if !strings.Contains(out, "\n"+v+"\t") && !strings.HasPrefix(out, v+"\t") {
			t.Errorf("__complete lists no %s:\n%s", v, out)
		}
	}
}

// complete returns the candidates `cove __complete args...` offers.
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := runCLI(t, append([]string{"__complete"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var cands []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, ":") {
			c, _, _ := strings.Cut(l, "\t")
			cands = append(cands, c)
		}
	}
	return cands
}

func TestCompleteIDsAndTags(t *testing.T) {
	fake, _ := startCLIFake(t)
	fake.make(2) // sb1, sb2
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"exec", ""}, []string{"sb1", "sb2"}},
		{[]string{"exec", "--cwd", "/tmp", "sb"}, []string{"sb1", "sb2"}},
		{[]string{"exec", "sb1", ""}, nil}, // the command: the shell's files
		{[]string{"kill", "sb1", ""}, []string{"sb2"}},
		{[]string{"branch", "s"}, []string{"sb1", "sb2"}},
		{[]string{"snapshot", "save", ""}, []string{"sb1", "sb2"}},
		{[]string{"cp", ""}, []string{"sb1:", "sb2:"}},
		{[]string{"cp", "./f", ""}, []string{"sb1:", "sb2:"}},
		{[]string{"cp", "sb1:f", ""}, nil},
		{[]string{"cp", "./"}, nil},
		{[]string{"spawn", ""}, []string{"py"}},
		{[]string{"snapshot", "rm", "py", ""}, nil},
		{[]string{"create", "--snapshot", ""}, []string{"py"}},
	}
	for _, tt := range tests {
		got := complete(t, tt.args...)
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("complete %q = %q, want %q", tt.args, got, tt.want)
		}
	}

	// A daemon that can't be reached, or refuses the key: nothing, quietly.
	t.Setenv("COVE_TOKEN", "wrong")
	if got := complete(t, "exec", ""); got != nil {
		t.Errorf("with a wrong key: %q", got)
	}
	t.Setenv("COVE_URL", "http://127.0.0.1:1")
	if got := complete(t, "kill", ""); got != nil {
		t.Errorf("with no daemon: %q", got)
	}
}

// TestBashCompletion sources `cove completion bash` in bash and completes
// as <Tab> would, with the test binary as cove.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	fake, _ := startCLIFake(t)
	fake.make(1)
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\nCOVE_TEST_AS_COVE=1 exec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "cove"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"cove ex", []string{"exec", "expose"}},
		{"cove exp", []string{"expose"}},
		{"cove sn", []string{"snapshot"}},
		{"cove exec ", []string{"sb1"}},
		{"cove kill s", []string{"sb1"}},
		{"cove spawn ", []string{"py"}},
	} {
		// cobra's script needs the bash-completion package; without it,
		// a stand-in for the one function it calls.
		script := `[[ -f /usr/share/bash-completion/bash_completion ]] && source /usr/share/bash-completion/bash_completion
declare -F _get_comp_words_by_ref >/dev/null || _get_comp_words_by_ref() {
	cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
}
source <(cove completion bash) || exit 1
complete -p cove >/dev/null || exit 1
COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<<"$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
__start_cove
printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command(bash, "--norc", "-c", script, "bash", tt.line).Output()
		if got := strings.Fields(string(out)); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("bash <Tab> after %q: %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
}

func TestQuiet(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"create", []string{"create", "-q"}, "sb1\n"},
		{"create -n", []string{"create", "-n", "3", "--quiet"}, "sb1\nsb2\nsb3\n"},
		{"spawn", []string{"spawn", "py", "-q", "-n", "2"}, "sb1\nsb2\n"},
		{"branch", []string{"branch", "-q", "sb0", "-n", "2", "--sandbox-token", "tok-sb0"}, "sb1\nsb2\n"},
		{"branch, no children", []string{"branch", "sb0", "-q", "--sandbox-token", "tok-sb0"}, ""},
		{"ls", []string{"ls", "-q"}, "sb0\n"},
		{"the flag package's spelling", []string{"create", "--q", "--n", "2"}, "sb1\nsb2\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake, _ := startCLIFake(t)
			fake.tokens["sb0"] = "tok-sb0"
			out, err := runCLI(t, tt.args...)
			if err != nil || out != tt.want {
				t.Errorf("cove %s = %q, %v; want %q", strings.Join(tt.args, " "), out, err, tt.want)
			}
		})
	}
}

// TestExecArgs: flags on either side of ID, and the command keeping its
// own, as before cobra (see TestParseArgs).
func TestExecArgs(t *testing.T) {
	startCLIFake(t)
	if _, err := runCLI(t, "create"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string // the fake echoes argv, $K and the cwd
	}{
		{[]string{"sb1", "ls", "-la", "--json"}, "ls -la --json"},
		{[]string{"sb1", "--cwd", "/tmp", "--", "ls", "-la"}, "ls -la/tmp"},
		{[]string{"--cwd=/x", "sb1", "ls"}, "ls/x"},
		{[]string{"sb1", "-e", "K=v", "git", "log", "--", "f"}, "git log -- fv"},
		{[]string{"--", "sb1", "ls", "--cwd", "/y"}, "ls --cwd /y"},
		{[]string{"-e", "K=1", "sb1", "--shell", "echo", "$K"}, "echo $K1"},
	} {
		out, err := runCLI(t, append([]string{"exec"}, tt.args...)...)
		if err != nil || out != tt.want {
			t.Errorf("exec %q: %q, %v; want %q", tt.args, out, err, tt.want)
		}
	}
}
