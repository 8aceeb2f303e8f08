package main

// Output: JSON, tables, ids one a line, and the formats of their cells.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// addOutputFlags adds --json and, if quietUsage is not empty, -q (what it
// prints).
func addOutputFlags(fs *pflag.FlagSet, asJSON, quiet *bool, quietUsage string) {
	fs.BoolVar(asJSON, "json", false, "print JSON")
	if quietUsage != "" {
		fs.BoolVarP(quiet, "quiet", "q", false, quietUsage)
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a writer for a column-aligned table; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// printList prints items as JSON ([] for none), as their keys one a line
// (quiet: what -q prints, for scripts), or as table prints them.
func printList[T any](w io.Writer, asJSON, quiet bool, items []T, key func(T) string, table func(io.Writer, []T) error) error {
	switch {
	case asJSON:
		if items == nil {
			items = []T{} // [] rather than null
		}
		return printJSON(w, items)
	case quiet:
		for _, it := range items {
			if _, err := fmt.Fprintln(w, key(it)); err != nil {
				return err
			}
		}
		return nil
	}
	return table(w, items)
}

// printMade prints newly made sandboxes: as JSON (with their sandbox
// tokens), as ids (quiet), or as a table.
func printMade(w io.Writer, asJSON, quiet bool, sbs []apitype.SandboxInfo) error {
	return printList(w, asJSON, quiet, sbs, sandboxID, printSandboxes)
}

func sandboxID(sb apitype.SandboxInfo) string { return sb.ID }

// printSandboxes writes a table of newly made sandboxes.
func printSandboxes(w io.Writer, sbs []apitype.SandboxInfo) error {
	now := time.Now()
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATUS\tBACKEND\tEXPIRES")
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", sb.ID, sb.Status, sb.Backend, fmtUntil(now, sb.ExpiresAtUnix))
	}
	return tw.Flush()
}

// sandboxImage is what a sandbox started from: IMAGE, or IMAGE@TAG for
// one spawned from a snapshot.
func sandboxImage(sb apitype.SandboxInfo) string {
	if sb.SnapshotTag != "" {
		return sb.Image + "@" + sb.SnapshotTag
	}
	return sb.Image
}

// isTerminal reports whether w is a terminal (or another character
// device, which is close enough to decide whether to draw progress).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// fmtDuration formats d for a table: two units at most, whole seconds.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	default:
		return fmt.Sprintf("%ds", d/time.Second)
	}
}

// fmtUntil formats the time from now to unix seconds, "expired" if past.
func fmtUntil(now time.Time, unix int64) string {
	if unix == 0 {
		return "-"
	}
	d := time.Unix(unix, 0).Sub(now)
	if d <= 0 {
		return "expired"
	}
	return fmtDuration(d)
}

// mbPerSec is a throughput in MB/s, decimal megabytes as network and disk
// speeds are usually quoted.
func mbPerSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}
