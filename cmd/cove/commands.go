package main

// What every verb shares: how errors become exit codes, argument checks,
// and the flag spellings kept from before cobra.

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exitError makes cove exit with code without printing anything more, as
// `cove exec` does with the command's own exit code.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in how a verb was called: a wrong flag, a missing
// argument. cove prints it with a pointer to the verb's help and exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode is the status cove exits with after err.
func exitCode(err error) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, new(usageError)):
		return 2
	}
	return 1
}

// report prints err, returned by cmd, to w.
func report(w io.Writer, cmd *cobra.Command, err error) {
	if errors.As(err, new(exitError)) {
		return
	}
	name := "cove"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", name)
	}
}

// needSubcommand is the RunE of a verb that only groups others (cove,
// cove snapshot, cove image): an unknown subcommand is a usage error, and
// none prints the usage and exits 2.
func needSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		hint := ""
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usageErrorf("unknown command %q%s", args[0], hint)
	}
	cmd.Usage() // to stderr
	return exitError{2}
}

// noArgs is the Args check of verbs that take no arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected arguments %q", args)
	}
	return nil
}

// nArgs is an Args check for between min and max (< 0: any number of)
// arguments; want says what to give.
func nArgs(min, max int, want string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < min || max >= 0 && len(args) > max {
			return usageError{errors.New(want)}
		}
		return nil
	}
}

// keepLetterFlags lets every one-letter flag under cmd (-n, -q, -e, ...)
// also be spelled with two dashes, --n, as the flag package cove used
// before cobra accepted.
func keepLetterFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Shorthand != "" && fs.Lookup(f.Shorthand) == nil {
			alias(fs, f.Name, f.Shorthand)
		}
	})
	for _, c := range cmd.Commands() {
		keepLetterFlags(c)
	}
}

// alias adds old, a hidden second name for flag name of fs.
func alias(fs *pflag.FlagSet, name, old string) *pflag.Flag {
	f := fs.Lookup(name)
	a := &pflag.Flag{Name: old, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue, NoOptDefVal: f.NoOptDefVal, Hidden: true}
	fs.AddFlag(a)
	return a
}

// deprecatedAlias adds old, a hidden name for flag name that warns to use
// name instead.
func deprecatedAlias(fs *pflag.FlagSet, name, old string) {
	alias(fs, name, old).Deprecated = "use --" + name
}
