package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func runCreate(ctx context.Context, args []string) error {
	fs, c := newFlagSet("create", "create [flags]")
	n := fs.Int("n", 1, "how many sandboxes to create")
	ttl := fs.Duration("ttl", 0, "lifetime, e.g. 15m (default: the daemon's)")
	cpus := fs.Int("cpus", 0, "CPUs per sandbox (default: the daemon's)")
	mem := fs.Int("memory-mib", 0, "memory per sandbox in MiB (default: the daemon's)")
	image := fs.String("image", "", "guest image (default: the daemon's)")
	snapshot := fs.String("snapshot", "", "start from this snapshot tag instead of booting the image")
	quiet := fs.Bool("q", false, "print only the sandbox ids, one a line")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments %q; see cove create -h", pos)
	}
	if *n < 1 || *n > apitype.MaxN {
		return fmt.Errorf("-n must be between 1 and %d", apitype.MaxN)
	}
	if *ttl != 0 && *ttl < time.Second {
		return fmt.Errorf("--ttl must be at least 1s")
	}
	// Cold starts of many sandboxes take a while; allow for them on top
	// of the usual bound rather than fail a create that is progressing.
	cl, daemon, err := c.client(client.WithTimeout(client.DefaultTimeout + time.Duration(*n)*time.Second))
	if err != nil {
		return err
	}
	sbs, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{
		SnapshotTag: *snapshot,
		Image:       *image,
		N:           *n,
		TTLSecs:     int64(*ttl / time.Second),
		CPUs:        *cpus,
		MemoryMiB:   *mem,
	})
	if err != nil {
		return explain(err, daemon)
	}

	// Save the tokens before printing: they exist only in this answer.
	rememberTokens("create", daemon, sbs)
	return printMade(c.json, *quiet, sbs)
}
