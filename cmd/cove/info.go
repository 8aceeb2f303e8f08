package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

func runInfo(ctx context.Context, args []string) error {
	fs, c := newFlagSet("info", "info [flags]")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments %q; see cove info -h", pos)
	}
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	info, err := cl.Info(ctx)
	if err != nil {
		return explain(err, daemon)
	}
	if c.json {
		return printJSON(os.Stdout, info)
	}
	l := info.Limits
	backend := info.Backend
	if info.BackendReason != "" {
		backend += " (" + info.BackendReason + ")"
	}
	secs := func(s int64) string { return fmtDuration(time.Duration(s) * time.Second) }
	tw := newTable(os.Stdout)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
	row("daemon", "%s", daemon)
	row("version", "%s", info.Version)
	row("backend", "%s", backend)
	row("runtime", "%s", info.RuntimeVer)
	if info.Accel != "" {
		row("accel", "%s", info.Accel)
	}
	row("default image", "%s", info.DefaultImage)
	row("sandboxes", "%d of at most %d", info.Sandboxes, l.MaxSandboxes)
	row("ttl", "%s by default, at most %s", secs(l.DefaultTTLSecs), secs(l.MaxTTLSecs))
	row("cpus", "%d by default, at most %d", l.DefaultCPUs, l.MaxCPUs)
	row("memory", "%d MiB by default, at most %d MiB", l.DefaultMemoryMiB, l.MaxMemoryMiB)
	row("per create", "at most %d sandboxes", l.MaxN)
	return tw.Flush()
}
